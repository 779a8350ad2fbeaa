import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError, type ErrorCode } from '@cortex/contracts';
import { decideRetry, MAX_REPLACEMENTS, Tries, type RetryDecision } from './retry.js';

const failed = (code: ErrorCode): CortexError => new CortexError(code, `failed with ${code}`);

describe('retry decider', () => {
  it('retry - a try that failed before the first token, by what failed it and what was tried already', () => {
    const cases: Array<[string, Parameters<typeof decideRetry>[0], RetryDecision]> = [
      [
        'the model left the worker: ask again, a little later each time',
        { error: failed('model_not_ready'), cancelled: false, excluded: 0, replaced: 0 },
        { kind: 'replace', delayMs: 50, forget: true },
      ],
      [
        'the model left again, after a worker was excluded',
        { error: failed('model_not_ready'), cancelled: false, excluded: 1, replaced: 2 },
        { kind: 'replace', delayMs: 150, forget: true },
      ],
      [
        'the model left too often',
        { error: failed('model_not_ready'), cancelled: false, excluded: 0, replaced: MAX_REPLACEMENTS },
        { kind: 'fail', forget: true },
      ],
      [
        'a lost worker: another worker',
        { error: failed('worker_lost'), cancelled: false, excluded: 0, replaced: 0 },
        { kind: 'elsewhere', forget: true },
      ],
      [
        'a worker that did not answer in time: another worker',
        { error: failed('timeout'), cancelled: false, excluded: 0, replaced: 1 },
        { kind: 'elsewhere', forget: true },
      ],
      [
        'nothing served its subject: another worker',
        { error: failed('service_unavailable'), cancelled: false, excluded: 0, replaced: 0 },
        { kind: 'elsewhere', forget: true },
      ],
      [
        'an upstream that failed (unreachable, 5xx, timed out): another place',
        { error: failed('upstream_unavailable'), cancelled: false, excluded: 0, replaced: 0 },
        { kind: 'elsewhere', forget: true },
      ],
      [
        'an upstream that answered 429: another place',
        { error: failed('upstream_rate_limited'), cancelled: false, excluded: 0, replaced: 0 },
        { kind: 'elsewhere', forget: true },
      ],
      [
        'a second worker failed it too',
        { error: failed('worker_lost'), cancelled: false, excluded: 1, replaced: 0 },
        { kind: 'fail', forget: true },
      ],
      [
        'the client went away: nothing runs for nobody, but the worker is still forgotten',
        { error: failed('worker_lost'), cancelled: true, excluded: 0, replaced: 0 },
        { kind: 'fail', forget: true },
      ],
      [
        'the request itself is bad',
        { error: failed('invalid_request'), cancelled: false, excluded: 0, replaced: 0 },
        { kind: 'fail', forget: false },
      ],
      [
        'not a CortexError (a bug)',
        { error: new Error('boom'), cancelled: false, excluded: 0, replaced: 0 },
        { kind: 'fail', forget: false },
      ],
    ];
    for (const [name, ask, expected] of cases) assert.deepEqual(decideRetry(ask), expected, name);
  });

  it('retry - with no other place for the next try, the client hears what failed the try before', async () => {
    const tries = new Tries(() => undefined);
    const upstream = failed('upstream_unavailable');
    const none = failed('no_worker');
    assert.equal(tries.placementFailed(none), none, 'nothing failed yet: the placement error stands');
    assert.equal(await tries.after(upstream, 'remote-1', false), 'elsewhere');
    assert.equal(tries.placementFailed(none), upstream);
    const other = failed('insufficient_memory');
    assert.equal(tries.placementFailed(other), other, 'any other placement error stands');
  });
});
