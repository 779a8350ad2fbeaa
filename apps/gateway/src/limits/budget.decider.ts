import type { BudgetWindow } from '@cortex/contracts';

/**
 * Token budgets of one scope (a key, or an account with all its keys) as pure functions of the
 * scope's stored state and the clock. A request reserves a bound on what it can spend before it is
 * dispatched; once it ends the reservation is replaced by what it really spent (settled) or dropped
 * (released). A request is admitted while spent + reserved is below the budget, so any number of
 * gateways together overshoot it by at most the last admitted reservation.
 */

export interface Reservation {
  tokens: number;
  /** When it stops counting if nobody settles or releases it (its gateway died). */
  expiresAt: number;
}

export interface BudgetState {
  /** The window the spend belongs to: `all` (balance), `2026-11-24` (day, UTC) or `2026-11` (month, UTC). */
  period: string;
  spent: number;
  reservations: Record<string, Reservation>;
}

export interface Budget {
  tokens: number;
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

/** The state in the current window: a new day or month starts with nothing spent. Expired reservations are dropped. */
export function current(state: BudgetState, window: BudgetWindow, now: number): BudgetState {
  const period = periodOf(window, now);
  const reservations = Object.fromEntries(Object.entries(state.reservations).filter(([, r]) => r.expiresAt > now));
  return { period, spent: state.period === period ? state.spent : 0, reservations };
}

export function reservedOf(state: BudgetState): number {
  return Object.values(state.reservations).reduce((sum, r) => sum + r.tokens, 0);
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
  if (now_.spent + reserved >= budget.tokens)
    return { kind: 'refuse', spent: now_.spent, reserved, resetsAt: periodEnd(budget.window, now) };
  const next = { ...now_, reservations: { ...now_.reservations, [id]: reservation } };
  return { kind: 'admit', next, remaining: Math.max(0, budget.tokens - now_.spent - reserved - reservation.tokens) };
}

/** The request ended having spent `used` tokens: its reservation becomes spend. */
export function settle(state: BudgetState, window: BudgetWindow, id: string, used: number, now: number): BudgetState {
  const next = current(state, window, now);
  const { [id]: _gone, ...rest } = next.reservations;
  return { ...next, spent: next.spent + used, reservations: rest };
}
