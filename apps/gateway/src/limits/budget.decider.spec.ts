import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  current,
  EMPTY_BUDGET,
  periodEnd,
  periodOf,
  refusalOf,
  reserve,
  settle,
  SETTLED_MEMORY_COUNT,
  SETTLED_MEMORY_MS,
  TOKENS,
  type Budget,
  type BudgetUnit,
  type BudgetState,
} from './budget.decider.js';

const T0 = Date.parse('2026-11-24T23:59:00Z');
const R = (amount: number, at = T0) => ({ amount, expiresAt: at + 60_000 });

describe('budget decider', () => {
  it('budget - admitted while spent + reserved is below the budget: overshoot is at most one reservation', () => {
    const budget: Budget = { limit: 1_000, window: 'balance' };
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
    assert.ok(state.spent <= budget.limit + 300);
  });

  it('budget - settling charges what was used, releasing (used 0) gives the reservation back', () => {
    const budget: Budget = { limit: 100, window: 'balance' };
    const a = reserve(EMPTY_BUDGET, budget, 'a', R(80), T0);
    assert.equal(a.kind, 'admit');
    if (a.kind !== 'admit') return;
    assert.equal(a.remaining, 20);
    const settled = settle(a.next, 'balance', 'a', 12, T0);
    assert.deepEqual(settled, { period: 'all', spent: 12, reservations: {}, settled: { a: T0 + SETTLED_MEMORY_MS } });
    const b = reserve(settled, budget, 'b', R(80), T0);
    assert.equal(b.kind, 'admit');
    if (b.kind === 'admit') assert.deepEqual(settle(b.next, 'balance', 'b', 0, T0).spent, 12);
  });

  // A settlement whose write NATS took but whose answer was lost is tried again: it must count once,
  // whether the reservation is still there, expired meanwhile, or remembered no more.
  const again: Array<[string, number, number]> = [
    ['tried again at once', T0 + 1_000, 12],
    ['tried again after the reservation expired', T0 + 61_000, 12],
    ['tried again within the memory', T0 + SETTLED_MEMORY_MS - 1, 12],
    ['tried again past the memory (charged twice: retries stop long before)', T0 + SETTLED_MEMORY_MS, 24],
  ];
  for (const [name, at, spent] of again) {
    it(`budget - a settlement ${name}: spent ${spent}`, () => {
      const a = reserve(EMPTY_BUDGET, { limit: 100, window: 'balance' }, 'a', R(80), T0);
      assert.equal(a.kind, 'admit');
      if (a.kind !== 'admit') return;
      const once = settle(a.next, 'balance', 'a', 12, T0);
      assert.equal(settle(once, 'balance', 'a', 12, at).spent, spent);
    });
  }

  it('budget - an entry remembers its latest settlements only, so its size stays bounded', () => {
    let state: BudgetState = EMPTY_BUDGET;
    for (let i = 0; i < SETTLED_MEMORY_COUNT + 10; i++) state = settle(state, 'balance', `r${i}`, 1, T0 + i);
    assert.equal(Object.keys(state.settled ?? {}).length, SETTLED_MEMORY_COUNT);
    assert.equal(state.settled?.r0, undefined, 'the oldest is forgotten');
    assert.equal(settle(state, 'balance', `r${SETTLED_MEMORY_COUNT + 9}`, 1, T0 + 1_000).spent, state.spent);
    assert.equal(current(state, 'balance', T0 + SETTLED_MEMORY_MS + 1e6).settled, undefined);
  });

  it('budget - a reservation nobody settles (its gateway died) stops counting at its expiry', () => {
    const budget: Budget = { limit: 100, window: 'balance' };
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
    const refused = reserve(spentYesterday, { limit: 500, window: 'day' }, 'x', R(1), T0);
    assert.deepEqual(refused, {
      kind: 'refuse',
      spent: 500,
      reserved: 0,
      resetsAt: Date.parse('2026-11-25T00:00:00Z'),
    });
    assert.equal(
      reserve(spentYesterday, { limit: 500, window: 'day' }, 'x', R(1, T0 + 60_000), T0 + 60_000).kind,
      'admit',
    );
  });

  const euros: BudgetUnit = { name: 'money', unit: 'EUR', amount: (b) => (b / 1e9).toFixed(2) };
  const refusals: Array<{
    what: string;
    budget: Budget;
    unit: BudgetUnit;
    refused: { spent: number; reserved: number; resetsAt: number | null };
    code: string;
    message: string;
  }> = [
    {
      what: 'tokens spent in a day',
      budget: { limit: 2_000, window: 'day' },
      unit: TOKENS,
      refused: { spent: 2_010, reserved: 0, resetsAt: Date.parse('2026-11-25T00:00:00Z') },
      code: 'insufficient_quota',
      message:
        'the key k has used its token budget: 2010 of 2000 tokens spent today (UTC) (it resets at 2026-11-25T00:00:00.000Z)',
    },
    {
      what: 'money spent in a month',
      budget: { limit: 50e9, window: 'month' },
      unit: euros,
      refused: { spent: 50.2e9, reserved: 1e9, resetsAt: Date.parse('2026-12-01T00:00:00Z') },
      code: 'insufficient_quota',
      message:
        'the key k has used its money budget: 50.20 of 50.00 EUR spent this month (UTC) (it resets at 2026-12-01T00:00:00.000Z)',
    },
    {
      what: 'a money balance spent to the billionth',
      budget: { limit: 5e9, window: 'balance' },
      unit: euros,
      refused: { spent: 5e9, reserved: 0, resetsAt: null },
      code: 'insufficient_quota',
      message: 'the key k has used its money budget: 5.00 of 5.00 EUR spent (a balance, which never resets)',
    },
    {
      what: 'money left, all of it reserved',
      budget: { limit: 50e9, window: 'month' },
      unit: euros,
      refused: { spent: 40e9, reserved: 12e9, resetsAt: Date.parse('2026-12-01T00:00:00Z') },
      code: 'rate_limit_exceeded',
      message:
        'rate limit reached (money budget): the key k has 10.00 EUR of its budget left, ' +
        'all reserved by running requests (12.00 reserved); retry when they end',
    },
    {
      what: 'tokens left, all of them reserved',
      budget: { limit: 100, window: 'balance' },
      unit: TOKENS,
      refused: { spent: 20, reserved: 90, resetsAt: null },
      code: 'rate_limit_exceeded',
      message:
        'rate limit reached (token budget): the key k has 80 tokens of its budget left, ' +
        'all reserved by running requests (90 reserved); retry when they end',
    },
  ];
  for (const { what, budget, unit, refused, code, message } of refusals) {
    it(`budget - refusal, ${what}: ${code}`, () => {
      const refusal = refusalOf('the key k', budget, unit, refused);
      assert.deepEqual(
        [refusal.code, refusal.message, refusal.retryAfterMs],
        [code, message, code === 'insufficient_quota' ? null : 1_000],
      );
    });
  }
});
