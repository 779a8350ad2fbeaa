import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError, NO_USAGE, type StreamEvent, type Usage } from '@cortex/contracts';
import { RunOutcome } from './run-outcome.js';

const TIMINGS = { queueMs: 1, promptMs: 2, ttftMs: 3, decodeTokensPerSecond: 100, totalMs: 10 };
const used = (promptTokens: number, completionTokens: number): Usage => ({
  ...NO_USAGE,
  promptTokens,
  completionTokens,
});
const text = (tokens: number[]): StreamEvent => ({ type: 'text', text: 'x', tokens }) as StreamEvent;
const finish = (usage: Usage): StreamEvent =>
  ({ type: 'finish', reason: 'stop', usage, timings: TIMINGS }) as unknown as StreamEvent;

/** The outcome's fields once it settled. */
function settled(outcome: RunOutcome, promptTokens: number): Promise<RunOutcome['fields']> {
  return new Promise((done) =>
    outcome.whenSettled(
      () => promptTokens,
      () => done(outcome.fields),
    ),
  );
}

describe('run outcome', () => {
  it("run outcome - a stream that ended settles at once with the worker's usage and timings, reported once", async () => {
    const reports: Array<Usage | null> = [];
    const outcome = new RunOutcome((usage) => reports.push(usage));
    outcome.observe(text([1, 2]));
    outcome.observe(finish(used(5, 2)));
    let settledAt: 'now' | 'later' | null = null;
    outcome.whenSettled(
      () => 0,
      () => (settledAt ??= 'now'),
    );
    settledAt ??= 'later';
    assert.equal(settledAt, 'now', 'nothing to wait for: settled in the same turn');
    assert.deepEqual(outcome.fields, {
      status: 200,
      errorCode: null,
      finishReason: 'stop',
      usage: used(5, 2),
      timings: TIMINGS,
    });
    outcome.reported();
    assert.deepEqual(reports, [used(5, 2)]);
  });

  const stopped: Array<{ name: string; last: StreamEvent | null; expected: Usage | null; prompt: number }> = [
    {
      name: "the worker's last event is its finish: its own count",
      last: finish(used(5, 9)),
      expected: used(5, 9),
      prompt: 5,
    },
    {
      name: 'no last event in time: the prompt and the output the client was given',
      last: null,
      expected: used(5, 3),
      prompt: 5,
    },
    {
      name: 'no last event, and neither prompt nor output known: nothing',
      last: null,
      expected: null,
      prompt: 0,
    },
  ];
  for (const c of stopped)
    it(`run outcome - a stream stopped before its end: ${c.name}`, async () => {
      const outcome = new RunOutcome(null);
      if (c.prompt > 0) outcome.observe(text([1, 2, 3]));
      outcome.cancelled();
      outcome.awaitLast(Promise.resolve(c.last));
      const got = await settled(outcome, c.prompt);
      assert.deepEqual(got.usage, c.expected);
      assert.equal(got.finishReason, 'cancelled');
    });

  it('run outcome - a failure sets the status only before the response started; the first finish reason stands', () => {
    const before = new RunOutcome(null);
    before.fail(new CortexError('no_worker', 'no worker'), false);
    assert.equal(before.fields.status, new CortexError('no_worker', 'x').status);
    assert.equal(before.fields.errorCode, 'no_worker');
    assert.equal(before.fields.finishReason, 'error');
    const after = new RunOutcome(null);
    after.cancelled();
    after.fail(new CortexError('worker_lost', 'gone'), true);
    assert.equal(after.fields.status, 200, 'the client already had its 200');
    assert.equal(after.failedWith, 'worker_lost');
    assert.equal(after.fields.finishReason, 'cancelled');
  });

  it('run outcome - an answer without a stream (embeddings, rerank) uses its prompt tokens', () => {
    const outcome = new RunOutcome(null);
    outcome.answered(7);
    assert.deepEqual(outcome.fields.usage, used(7, 0));
    assert.equal(outcome.fields.finishReason, 'stop');
  });
});
