import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  CONCURRENCY_RETRY_MS,
  decide,
  EMPTY_SCOPE,
  goDuration,
  release,
  renew,
  undo,
  type ScopeDecision,
  type ScopeLimits,
  type ScopeState,
} from './rate-limit.decider.js';

const T0 = 1_700_000_000_000;
const lease = (id: string, at = T0) => ({ id, expiresAt: at + 30_000 });

/** Runs `count` requests at the times given, feeding each admission's state to the next. */
function run(
  limits: ScopeLimits,
  times: number[],
  state: ScopeState = EMPTY_SCOPE,
): { decisions: ScopeDecision[]; state: ScopeState } {
  const decisions: ScopeDecision[] = [];
  times.forEach((at, i) => {
    const decision = decide(state, limits, at, lease(`l${i}`, at));
    decisions.push(decision);
    if (decision.kind === 'admit') state = decision.next;
  });
  return { decisions, state };
}

describe('rate limit decider', () => {
  const rpmCases: Array<[string, ScopeLimits, number[], string]> = [
    ['3 rpm: three at once pass, the fourth is refused', { requests_per_minute: 3 }, [T0, T0, T0, T0], 'AAAR'],
    [
      '3 rpm: one more passes after 20 s, not before',
      { requests_per_minute: 3 },
      [T0, T0, T0, T0 + 19_999, T0 + 20_000],
      'AAARA',
    ],
    ['1 rpm: one a minute', { requests_per_minute: 1 }, [T0, T0 + 30_000, T0 + 60_000, T0 + 60_001], 'ARAR'],
    [
      '60 rpm at one a second never refuses',
      { requests_per_minute: 60 },
      Array.from({ length: 120 }, (_, i) => T0 + i * 1_000),
      'A'.repeat(120),
    ],
    [
      '7 rpm (a period that is not whole ms): exactly 7 pass',
      { requests_per_minute: 7 },
      Array(9).fill(T0),
      'AAAAAAARR',
    ],
    ['no limits: everything passes', {}, Array(50).fill(T0), 'A'.repeat(50)],
  ];
  for (const [what, limits, times, expected] of rpmCases) {
    it(`rate limit - ${what}`, () => {
      const { decisions } = run(limits, times);
      assert.equal(decisions.map((d) => (d.kind === 'admit' ? 'A' : 'R')).join(''), expected);
    });
  }

  it('rate limit - remaining and reset as OpenAI reports them, and the wait of a refusal', () => {
    const { decisions } = run({ requests_per_minute: 3 }, [T0, T0, T0, T0]);
    assert.deepEqual(
      decisions.map((d) => d.requests),
      [
        { limit: 3, remaining: 2, resetMs: 20_000 },
        { limit: 3, remaining: 1, resetMs: 40_000 },
        { limit: 3, remaining: 0, resetMs: 60_000 },
        { limit: 3, remaining: 0, resetMs: 60_000 },
      ],
    );
    const refused = decisions[3]!;
    assert.equal(refused.kind, 'refuse');
    if (refused.kind === 'refuse') {
      assert.equal(refused.limit, 'requests_per_minute');
      assert.equal(refused.retryAfterMs, 20_000);
    }
  });

  it('rate limit - concurrency: a lease per request, refused at the limit, free again on release', () => {
    const limits = { concurrent_requests: 2 };
    const { decisions, state } = run(limits, [T0, T0, T0]);
    assert.deepEqual(
      decisions.map((d) => d.kind),
      ['admit', 'admit', 'refuse'],
    );
    const refused = decisions[2]!;
    if (refused.kind === 'refuse')
      assert.deepEqual(
        [refused.limit, refused.retryAfterMs, refused.running],
        ['concurrent_requests', CONCURRENCY_RETRY_MS, 2],
      );
    assert.deepEqual(Object.keys(state.leases), ['l0', 'l1']);
    const freed = release(state, 'l0', T0 + 1);
    assert.equal(decide(freed, limits, T0 + 2, lease('l3')).kind, 'admit');
  });

  it('rate limit - a lease stops counting when it expires (its gateway died) unless renewed', () => {
    const limits = { concurrent_requests: 1 };
    const { state } = run(limits, [T0]);
    assert.equal(decide(state, limits, T0 + 29_999, lease('x')).kind, 'refuse');
    assert.equal(decide(state, limits, T0 + 30_000, lease('x')).kind, 'admit');
    const renewed = renew(state, ['l0'], T0 + 60_000, T0 + 10_000);
    assert.equal(decide(renewed, limits, T0 + 45_000, lease('x')).kind, 'refuse');
    // Expired leases are dropped from the state on the next write.
    const next = decide(state, limits, T0 + 31_000, lease('y', T0 + 31_000));
    assert.equal(next.kind, 'admit');
    if (next.kind === 'admit') assert.deepEqual(Object.keys(next.next.leases), ['y']);
  });

  it('rate limit - concurrency refuses before the rate is charged; both limits together', () => {
    const limits = { requests_per_minute: 10, concurrent_requests: 1 };
    const { decisions, state } = run(limits, [T0, T0]);
    assert.deepEqual(
      decisions.map((d) => d.kind),
      ['admit', 'refuse'],
    );
    assert.equal(state.tat, T0 + 6_000, 'the refused request did not use the rate');
  });

  it('rate limit - undo gives back the lease and the place in the rate', () => {
    const limits = { requests_per_minute: 2, concurrent_requests: 5 };
    const { state } = run(limits, [T0, T0]);
    assert.equal(decide(state, limits, T0, lease('z')).kind, 'refuse');
    const undone = undo(state, limits, 'l1', T0);
    assert.deepEqual(Object.keys(undone.leases), ['l0']);
    assert.equal(decide(undone, limits, T0, lease('z')).kind, 'admit');
  });

  const durations: Array<[number, string]> = [
    [0, '0s'],
    [120, '120ms'],
    [999.2, '1000ms'],
    [1_000, '1s'],
    [17_500, '17.5s'],
    [20_000, '20s'],
    [360_000, '6m0s'],
    [90_250, '1m30.25s'],
    [3_600_000, '1h0m0s'],
    [59_999, '1m0s'],
  ];
  for (const [ms, text] of durations) {
    it(`rate limit - ${ms} ms reads ${text}`, () => assert.equal(goDuration(ms), text));
  }
});
