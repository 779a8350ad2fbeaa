import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { MAX_TEXT_DEPTH, textTooDeep, tooDeep } from './body-depth.js';

const nest = (depth: number): unknown => JSON.parse(`${'['.repeat(depth)}${']'.repeat(depth)}`);

describe('body depth', () => {
  it('body depth - names the top-level field that nests too deep', () => {
    assert.equal(tooDeep({ model: 'm', messages: [{ role: 'user', content: 'hi' }], tools: nest(200) }, 128), 'tools');
  });

  it('body depth - bodies at the limit and scalars pass', () => {
    assert.equal(tooDeep({ a: nest(127) }, 128), null);
    assert.equal(tooDeep('text', 128), null);
    assert.equal(tooDeep(null, 128), null);
  });

  it('body depth - a top-level array names its element, and 100,000 levels do not overflow the stack', () => {
    assert.equal(tooDeep(nest(100_000), 128), '0');
    assert.equal(tooDeep(nest(3), 2), '0');
  });

  it('body depth - the text pre-scan counts brackets outside strings only, and names the top-level field', () => {
    const cases: Array<[string, number, string | null]> = [
      ['{"a":[[1]]}', 3, null],
      ['{"a":[[[1]]]}', 3, 'a'],
      ['{"a":"[[[[[[[[[["}', 2, null],
      ['{"a":"\\"[[[[["}', 1, null],
      ['{"a":"\\\\",  "tools":[[[1]]]}', 3, 'tools'],
      ['{"model":"m","input":"x","messages":[[[[1]]]]}', 3, 'messages'],
      ['[{"a":1},[[[1]]]]', 3, '1'],
      ['[[[[]]]]', 2, '0'],
      ['[]', 1, null],
      ['"just text"', 0, null],
    ];
    for (const [text, limit, field] of cases) assert.equal(textTooDeep(text, limit), field, `${text} within ${limit}`);
    assert.equal(textTooDeep(`{"tools":${'['.repeat(4_000_000)}`), 'tools', 'the attack: 4 million levels');
    assert.equal(textTooDeep(`${'['.repeat(MAX_TEXT_DEPTH)}${']'.repeat(MAX_TEXT_DEPTH)}`), null);
  });
});
