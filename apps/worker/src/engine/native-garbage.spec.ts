import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { NativeGarbage, samplerBytes } from './native-garbage.js';

describe('NativeGarbage', () => {
  it('native garbage - asks for one major collection each time the generations left the threshold, not before', () => {
    const asked: unknown[] = [];
    const garbage = new NativeGarbage(1_000, (options) => asked.push(options));
    for (let i = 0; i < 9; i++) garbage.left(100);
    assert.equal(asked.length, 0);
    garbage.left(100);
    assert.deepEqual(asked, [{ type: 'major', execution: 'async' }]);
    for (let i = 0; i < 25; i++) garbage.left(100);
    assert.equal(garbage.collections, 3);
  });

  it('native garbage - a threshold of 0 never collects; the default collector is V8 itself', () => {
    const off = new NativeGarbage(0);
    for (let i = 0; i < 100; i++) off.left(samplerBytes(32_000));
    assert.equal(off.collections, 0);
    // The real collector: a held-only-weakly object is gone after the collection it asked for runs.
    const on = new NativeGarbage(1);
    const ref = new WeakRef({ big: new Array(1_000).fill(0) });
    on.left(1);
    assert.equal(on.collections, 1);
    return new Promise<void>((done, fail) => {
      const deadline = Date.now() + 5_000;
      const check = (): void => {
        if (ref.deref() === undefined) return done();
        if (Date.now() > deadline) return fail(new Error('the object was not collected within 5 s'));
        on.left(1);
        setTimeout(check, 20);
      };
      setTimeout(check, 20);
    });
  });

  it('native garbage - a sampler keeps 12 bytes per vocabulary token', () => {
    assert.equal(samplerBytes(32_000), 384_000);
  });
});
