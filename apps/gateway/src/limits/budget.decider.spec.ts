import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  current,
  EMPTY_BUDGET,
  periodEnd,
  periodOf,
  reserve,
  settle,
  type Budget,
  type BudgetState,
} from './budget.decider.js';

const T0 = Date.parse('2026-11-24T23:59:00Z');
const R = (tokens: number, at = T0) => ({ tokens, expiresAt: at + 60_000 });

describe('budget decider', () => {
  it('budget - admitted while spent + reserved is below the budget: overshoot is at most one reservation', () => {
    const budget: Budget = { tokens: 1_000, window: 'balance' };
    let state: BudgetState = EMPTY_BUDGET;
    const kinds: string[] = [];
    for (let i = 0; i < 5; i++) {
      const d = reserve(state, budget, `r${i}`, R(300), T0);
      kinds.push(d.kind);
      if (d.kind === 'admit') state = d.next;
    }
    // 0, 300, 600, 900 reserved are below 1000: four pass; 1200 reserved is the most it can reach.
    assert.deepEqual(kinds, ['admit', 'admit', 'admit', 'admit', 'refuse']);
    for (let i = 0; i < 4; i++) state = settle(state, 'balance', `r${i}`, 300, T0);
    assert.equal(state.spent, 1_200);
    assert.ok(state.spent <= budget.tokens + 300);
  });

  it('budget - settling charges what was used, releasing (used 0) gives the reservation back', () => {
    const budget: Budget = { tokens: 100, window: 'balance' };
    const a = reserve(EMPTY_BUDGET, budget, 'a', R(80), T0);
    assert.equal(a.kind, 'admit');
    if (a.kind !== 'admit') return;
    assert.equal(a.remaining, 20);
    const settled = settle(a.next, 'balance', 'a', 12, T0);
    assert.deepEqual(settled, { period: 'all', spent: 12, reservations: {} });
    const b = reserve(settled, budget, 'b', R(80), T0);
    assert.equal(b.kind, 'admit');
    if (b.kind === 'admit') assert.deepEqual(settle(b.next, 'balance', 'b', 0, T0).spent, 12);
  });

  it('budget - a reservation nobody settles (its gateway died) stops counting at its expiry', () => {
    const budget: Budget = { tokens: 100, window: 'balance' };
    const a = reserve(EMPTY_BUDGET, budget, 'a', R(100), T0);
    assert.equal(a.kind, 'admit');
    if (a.kind !== 'admit') return;
    assert.equal(reserve(a.next, budget, 'b', R(10), T0 + 59_999).kind, 'refuse');
    assert.equal(reserve(a.next, budget, 'b', R(10), T0 + 60_000).kind, 'admit');
  });

  const windows: Array<[Budget['window'], string, string | null]> = [
    ['balance', 'all', null],
    ['day', '2026-11-24', '2026-11-25T00:00:00.000Z'],
    ['month', '2026-11', '2026-12-01T00:00:00.000Z'],
  ];
  for (const [window, period, end] of windows) {
    it(`budget - ${window}: period ${period}, resets ${end ?? 'never'}`, () => {
      assert.equal(periodOf(window, T0), period);
      const at = periodEnd(window, T0);
      assert.equal(at === null ? null : new Date(at).toISOString(), end);
    });
  }

  it('budget - a new day starts with nothing spent; a balance never resets', () => {
    const spentYesterday: BudgetState = { period: '2026-11-24', spent: 500, reservations: {} };
    assert.equal(current(spentYesterday, 'day', T0).spent, 500);
    assert.equal(current(spentYesterday, 'day', T0 + 60_000).spent, 0);
    assert.equal(current({ period: 'all', spent: 500, reservations: {} }, 'balance', T0 + 86_400_000 * 400).spent, 500);
    const refused = reserve(spentYesterday, { tokens: 500, window: 'day' }, 'x', R(1), T0);
    assert.deepEqual(refused, {
      kind: 'refuse',
      spent: 500,
      reserved: 0,
      resetsAt: Date.parse('2026-11-25T00:00:00Z'),
    });
    assert.equal(
      reserve(spentYesterday, { tokens: 500, window: 'day' }, 'x', R(1, T0 + 60_000), T0 + 60_000).kind,
      'admit',
    );
  });
});
