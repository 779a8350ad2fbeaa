/**
 * Rate limits of one scope (a key, or an account with all its keys) as pure functions of the scope's
 * stored state and the clock: no bus, no timers. `RateLimiter` keeps the state in NATS KV and applies
 * these with compare-and-set, so every gateway decides on the same numbers.
 *
 * Requests per minute use GCRA (the generic cell rate algorithm): the state is one time, `tat`, when
 * the scope's bucket would be empty again at the steady rate. A fresh scope admits `rpm` requests at
 * once, then one every `60 s / rpm`. This is the bucket OpenAI's headers describe: `remaining` is how
 * many more would pass now, and `reset` is when the bucket is full again.
 *
 * Concurrent requests are leases with an expiry, renewed by the gateway that holds them. The lease of
 * a gateway that died stops counting when it expires, so it holds no slot for ever.
 */

export const MINUTE_MS = 60_000;

export interface ScopeLimits {
  requests_per_minute?: number;
  concurrent_requests?: number;
}

export interface ScopeState {
  /** GCRA's theoretical arrival time, ms since the epoch (0: never used). */
  tat: number;
  /** Concurrency leases: lease id → when it stops counting (ms since the epoch). */
  leases: Record<string, number>;
}

export const EMPTY_SCOPE: ScopeState = { tat: 0, leases: {} };

/** The request window after a decision, as the `x-ratelimit-*-requests` headers say it. */
export interface RequestWindow {
  limit: number;
  remaining: number;
  /** Until the window is whole again. */
  resetMs: number;
}

export type LimitName = 'requests_per_minute' | 'concurrent_requests';

export type ScopeDecision =
  | { kind: 'admit'; next: ScopeState; requests: RequestWindow | null }
  | { kind: 'refuse'; limit: LimitName; retryAfterMs: number; requests: RequestWindow | null; running: number };

/** A refused concurrent request is told to try again after this long: nothing says when one ends. */
export const CONCURRENCY_RETRY_MS = 1_000;

const intervalOf = (rpm: number): number => MINUTE_MS / rpm;

/** The request window of a scope whose GCRA time is `tat`. */
export function requestWindow(rpm: number, tat: number, now: number): RequestWindow {
  const interval = intervalOf(rpm);
  const ahead = Math.max(0, tat - now);
  // 1e-9: 60 000 / 7 is not exact, and a whole request must not read as 0.999…
  return {
    limit: rpm,
    remaining: Math.max(0, Math.floor((MINUTE_MS - ahead) / interval + 1e-9)),
    resetMs: Math.ceil(ahead),
  };
}

/** Leases that still count at `now`. */
export function liveLeases(state: ScopeState, now: number): Record<string, number> {
  return Object.fromEntries(Object.entries(state.leases).filter(([, expires]) => expires > now));
}

/**
 * Admits one request into the scope, or says which limit refuses it and for how long. A lease is
 * taken only when the scope limits concurrency.
 */
export function decide(
  state: ScopeState,
  limits: ScopeLimits,
  now: number,
  lease: { id: string; expiresAt: number },
): ScopeDecision {
  const leases = liveLeases(state, now);
  const running = Object.keys(leases).length;
  const rpm = limits.requests_per_minute;
  const concurrent = limits.concurrent_requests;
  const current = rpm === undefined ? null : requestWindow(rpm, state.tat, now);
  if (concurrent !== undefined && running >= concurrent) {
    return {
      kind: 'refuse',
      limit: 'concurrent_requests',
      retryAfterMs: CONCURRENCY_RETRY_MS,
      requests: current,
      running,
    };
  }
  let tat = state.tat;
  if (rpm !== undefined) {
    const interval = intervalOf(rpm);
    const start = Math.max(state.tat, now);
    // GCRA: admitted while the bucket holds less than a minute's worth after this request.
    if (start + interval - now > MINUTE_MS + 1e-6) {
      return {
        kind: 'refuse',
        limit: 'requests_per_minute',
        retryAfterMs: Math.ceil(start + interval - now - MINUTE_MS),
        requests: { ...requestWindow(rpm, state.tat, now), remaining: 0 },
        running,
      };
    }
    tat = start + interval;
  }
  const next: ScopeState = {
    tat,
    leases: concurrent === undefined ? leases : { ...leases, [lease.id]: lease.expiresAt },
  };
  return { kind: 'admit', next, requests: rpm === undefined ? null : requestWindow(rpm, tat, now) };
}

/** The request ended: its lease stops counting (expired leases are dropped too). */
export function release(state: ScopeState, leaseId: string, now: number): ScopeState {
  const leases = liveLeases(state, now);
  delete leases[leaseId];
  return { tat: state.tat, leases };
}

/** Takes back an admission that another scope refused: its lease and its place in the rate. */
export function undo(state: ScopeState, limits: ScopeLimits, leaseId: string, now: number): ScopeState {
  const released = release(state, leaseId, now);
  const rpm = limits.requests_per_minute;
  return rpm === undefined ? released : { ...released, tat: Math.max(now, released.tat - intervalOf(rpm)) };
}

/** The holder is alive: its leases count until `expiresAt`. */
export function renew(state: ScopeState, leaseIds: readonly string[], expiresAt: number, now: number): ScopeState {
  const leases = liveLeases(state, now);
  for (const id of leaseIds) if (id in leases) leases[id] = expiresAt;
  return { tat: state.tat, leases };
}

/** A duration as OpenAI writes its reset headers (Go's format): `120ms`, `1s`, `17.5s`, `6m0s`, `1h0m0s`. */
export function goDuration(ms: number): string {
  if (ms <= 0) return '0s';
  if (ms < 1_000) return `${Math.ceil(ms)}ms`;
  const centis = Math.round(ms / 10);
  const hours = Math.floor(centis / 360_000);
  const minutes = Math.floor((centis % 360_000) / 6_000);
  const s = `${(centis % 6_000) / 100}s`;
  if (hours > 0) return `${hours}h${minutes}m${s}`;
  if (minutes > 0) return `${minutes}m${s}`;
  return s;
}
