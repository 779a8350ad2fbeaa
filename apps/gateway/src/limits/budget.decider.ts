import type { BudgetWindow } from '@cortex/contracts';

/**
 * Budgets of one scope (a key, or an account with all its keys) as pure functions of the scope's
 * stored state and the clock. A request reserves a bound on what it can spend before it is
 * dispatched; once it ends the reservation is replaced by what it really spent (settled) or dropped
 * (released). A request is admitted while spent + reserved is below the budget, so any number of
 * gateways together overshoot it by at most the last admitted reservation. The amounts are whole
 * numbers in the budget's unit: tokens for a token budget, billionths of the currency for a money
 * budget (money.decider.ts), so every sum is exact.
 */

export interface Reservation {
  amount: number;
  /** When it stops counting if nobody settles or releases it (its gateway died). */
  expiresAt: number;
}

export interface BudgetState {
  /** The window the spend belongs to: `all` (balance), `2026-11-24` (day, UTC) or `2026-11` (month, UTC). */
  period: string;
  spent: number;
  reservations: Record<string, Reservation>;
  /**
   * The reservations settled lately, with when each is forgotten: a settlement tried again after a
   * write whose answer was lost (NATS restarting) counts once. Entries stored before it have none.
   */
  settled?: Record<string, number>;
}

/** How long a settled reservation is remembered: longer than a settlement is tried (FINAL_WRITE_RETRIES_MS). */
export const SETTLED_MEMORY_MS = 120_000;
/** The most settled reservations one entry remembers (the oldest go first): it bounds the entry's size. */
export const SETTLED_MEMORY_COUNT = 256;

export interface Budget {
  /** The most the scope may spend per window, in the budget's unit. */
  limit: number;
  window: BudgetWindow;
}

export const EMPTY_BUDGET: BudgetState = { period: '', spent: 0, reservations: {} };

export type BudgetDecision =
  | { kind: 'admit'; next: BudgetState; remaining: number }
  | { kind: 'refuse'; spent: number; reserved: number; resetsAt: number | null };

export function periodOf(window: BudgetWindow, now: number): string {
  const iso = new Date(now).toISOString();
  return window === 'balance' ? 'all' : window === 'day' ? iso.slice(0, 10) : iso.slice(0, 7);
}

/** When the window after `now` begins (null: a balance never resets). */
export function periodEnd(window: BudgetWindow, now: number): number | null {
  const d = new Date(now);
  if (window === 'day') return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() + 1);
  if (window === 'month') return Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
  return null;
}

/**
 * The state in the current window: a new day or month starts with nothing spent. Expired reservations,
 * and settled ones past their memory, are dropped.
 */
export function current(state: BudgetState, window: BudgetWindow, now: number): BudgetState {
  const period = periodOf(window, now);
  const reservations = Object.fromEntries(Object.entries(state.reservations).filter(([, r]) => r.expiresAt > now));
  const settled = Object.entries(state.settled ?? {}).filter(([, forgetAt]) => forgetAt > now);
  return {
    period,
    spent: state.period === period ? state.spent : 0,
    reservations,
    ...(settled.length > 0 && { settled: Object.fromEntries(settled) }),
  };
}

export function reservedOf(state: BudgetState): number {
  return Object.values(state.reservations).reduce((sum, r) => sum + r.amount, 0);
}

export function reserve(
  state: BudgetState,
  budget: Budget,
  id: string,
  reservation: Reservation,
  now: number,
): BudgetDecision {
  const now_ = current(state, budget.window, now);
  const reserved = reservedOf(now_);
  if (now_.spent + reserved >= budget.limit)
    return { kind: 'refuse', spent: now_.spent, reserved, resetsAt: periodEnd(budget.window, now) };
  const next = { ...now_, reservations: { ...now_.reservations, [id]: reservation } };
  return { kind: 'admit', next, remaining: Math.max(0, budget.limit - now_.spent - reserved - reservation.amount) };
}

/**
 * The request ended having spent `used` (in the budget's unit): its reservation becomes spend, once —
 * a reservation settled already (the same settlement tried again) changes nothing.
 */
export function settle(state: BudgetState, window: BudgetWindow, id: string, used: number, now: number): BudgetState {
  const next = current(state, window, now);
  if (next.settled?.[id] !== undefined) return next;
  const { [id]: _gone, ...rest } = next.reservations;
  const remembered = Object.entries({ ...next.settled, [id]: now + SETTLED_MEMORY_MS })
    .sort(([, a], [, b]) => b - a)
    .slice(0, SETTLED_MEMORY_COUNT);
  return { ...next, spent: next.spent + used, reservations: rest, settled: Object.fromEntries(remembered) };
}

/** What a budget counts, as its messages name it. */
export interface BudgetUnit {
  /** The budget's name: "its token budget", "its money budget". */
  name: 'token' | 'money';
  /** After an amount: `tokens`, or the currency. */
  unit: string;
  /** An amount in the budget's unit as a person reads it. */
  amount: (value: number) => string;
}

export const TOKENS: BudgetUnit = { name: 'token', unit: 'tokens', amount: String };

/**
 * Why a reservation was refused, for the client. Spent (nothing left before the window resets):
 * `insufficient_quota`, not worth retrying, with what was spent, the limit, the unit and when it
 * resets. Only reserved by requests still running: `rate_limit_exceeded`, worth retrying once they
 * settle.
 */
export type BudgetRefusal =
  | { code: 'insufficient_quota'; message: string; retryAfterMs: null }
  | { code: 'rate_limit_exceeded'; message: string; retryAfterMs: number };

export function refusalOf(
  /** Whose budget: `the key key_… ("ci")`, `the account team-a`. */
  label: string,
  budget: Budget,
  unit: BudgetUnit,
  refused: { spent: number; reserved: number; resetsAt: number | null },
): BudgetRefusal {
  const { limit, window } = budget;
  const show = (value: number): string => `${unit.amount(value)} ${unit.unit}`;
  if (refused.spent < limit)
    return {
      code: 'rate_limit_exceeded',
      message:
        `rate limit reached (${unit.name} budget): ${label} has ${show(limit - refused.spent)} of its budget left, ` +
        `all reserved by running requests (${unit.amount(refused.reserved)} reserved); retry when they end`,
      retryAfterMs: 1_000,
    };
  const when =
    refused.resetsAt === null
      ? 'a balance, which never resets'
      : `it resets at ${new Date(refused.resetsAt).toISOString()}`;
  const period = window === 'balance' ? '' : window === 'day' ? ' today (UTC)' : ' this month (UTC)';
  return {
    code: 'insufficient_quota',
    message: `${label} has used its ${unit.name} budget: ${unit.amount(refused.spent)} of ${show(limit)} spent${period} (${when})`,
    retryAfterMs: null,
  };
}
