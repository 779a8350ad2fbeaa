import { MINUTE_MS } from './rate-limit.decider.js';

/**
 * Tokens per minute of one scope (a key, or an account with all its keys) as pure functions, like
 * requests per minute: GCRA over tokens, where each token takes `60 s / tpm` of a one-minute bucket
 * and the state is the time `tat` at which the bucket would be empty again. A request reserves its
 * bound (limits/reservation.ts) before dispatch and is admitted while the bucket is not full, so all
 * gateways together overshoot by at most the last admitted reservation. When it ends, the tokens it
 * reserved but did not use are given back.
 */

export interface TokenState {
  /** GCRA's theoretical arrival time over tokens, ms since the epoch (0: never used). */
  tat: number;
}

export const EMPTY_TOKENS: TokenState = { tat: 0 };

/** The token window, as the `x-ratelimit-*-tokens` headers say it. */
export interface TokenWindow {
  limit: number;
  remaining: number;
  /** Until the window is whole again. */
  resetMs: number;
}

export type TokenDecision =
  | { kind: 'admit'; next: TokenState; window: TokenWindow }
  | { kind: 'refuse'; retryAfterMs: number; window: TokenWindow };

const intervalOf = (tpm: number): number => MINUTE_MS / tpm;

/** The window of a scope whose GCRA time is `tat`. */
export function tokenWindow(tpm: number, tat: number, now: number): TokenWindow {
  const ahead = Math.max(0, tat - now);
  return {
    limit: tpm,
    remaining: Math.max(0, Math.floor((MINUTE_MS - ahead) / intervalOf(tpm) + 1e-9)),
    resetMs: Math.ceil(ahead),
  };
}

/** Admits a request that reserves `tokens` while the bucket is not full; else says when a token frees. */
export function admitTokens(state: TokenState, tpm: number, tokens: number, now: number): TokenDecision {
  const interval = intervalOf(tpm);
  const start = Math.max(state.tat, now);
  if (start - now > MINUTE_MS - interval + 1e-6) {
    return {
      kind: 'refuse',
      retryAfterMs: Math.max(1, Math.ceil(start - now - MINUTE_MS + interval)),
      window: tokenWindow(tpm, state.tat, now),
    };
  }
  const next = { tat: start + tokens * interval };
  return { kind: 'admit', next, window: tokenWindow(tpm, next.tat, now) };
}

/** The request used `used` of the `reserved` tokens: the rest goes back to the bucket (0 used: all of it). */
export function settleTokens(state: TokenState, tpm: number, reserved: number, used: number, now: number): TokenState {
  const back = (reserved - used) * intervalOf(tpm);
  return { tat: Math.max(now, state.tat - back) };
}
