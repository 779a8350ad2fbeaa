import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { SharedAnswer } from './shared-answer.js';

describe('SharedAnswer', () => {
  it('computes once for callers that arrive while it is in flight, and again once the answer is older than its age', async () => {
    let clock = 0;
    let computed = 0;
    let release: () => void = () => undefined;
    const answer = new SharedAnswer(
      () =>
        new Promise<number>((resolve) => {
          computed += 1;
          const n = computed;
          release = () => resolve(n);
        }),
      1_000,
      () => clock,
    );
    const first = answer.get();
    const second = answer.get();
    release();
    assert.deepEqual(await Promise.all([first, second]), [1, 1]);
    clock = 999;
    assert.equal(await answer.get(), 1);
    assert.equal(computed, 1);
    clock = 1_000;
    const third = answer.get();
    release();
    assert.equal(await third, 2);
    assert.equal(computed, 2);
  });

  it('keeps no failed answer: the next caller computes again', async () => {
    let calls = 0;
    const answer = new SharedAnswer(async () => {
      calls += 1;
      if (calls === 1) throw new Error('bus down');
      return 'ok';
    }, 1_000);
    await assert.rejects(answer.get(), /bus down/);
    assert.equal(await answer.get(), 'ok');
    assert.equal(calls, 2);
  });
});
