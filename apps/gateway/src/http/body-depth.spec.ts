import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { tooDeep } from './body-depth.js';

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
});
