import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { MAX_TEXT_DEPTH, nestsDeeper, tooDeep } from './body-depth.js';

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

  it('body depth - the text pre-scan counts brackets outside strings only', () => {
    const cases: Array<[string, number, boolean]> = [
      ['{"a":[[1]]}', 3, false],
      ['{"a":[[[1]]]}', 3, true],
      ['{"a":"[[[[[[[[[["}', 2, false],
      ['{"a":"\\"[[[[["}', 1, false],
      ['{"a":"\\\\",  "b":[[[1]]]}', 3, true],
      ['[]', 1, false],
      ['"just text"', 0, false],
    ];
    for (const [text, limit, deeper] of cases) assert.equal(nestsDeeper(text, limit), deeper, `${text} within ${limit}`);
    assert.equal(nestsDeeper(`{"tools":${'['.repeat(4_000_000)}`), true, 'the attack: 4 million levels');
    assert.equal(nestsDeeper(`${'['.repeat(MAX_TEXT_DEPTH)}${']'.repeat(MAX_TEXT_DEPTH)}`), false);
  });
});
