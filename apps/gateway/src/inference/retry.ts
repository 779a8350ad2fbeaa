import { CortexError } from '@cortex/contracts';

/** When a request that failed on a worker is placed again, for generation, counting and retrieval alike. */

/** How often a request is placed again because its model left the worker it was placed on. */
export const MAX_REPLACEMENTS = 3;

/**
 * Failures that say nothing about the request itself, only about the worker that had it (or the
 * upstream it serves from: unreachable, failing or rate limited).
 */
export const RETRYABLE: ReadonlySet<string> = new Set([
  'worker_lost',
  'service_unavailable',
  'timeout',
  'upstream_unavailable',
  'upstream_rate_limited',
]);

/**
 * A failure about the worker or the model it held, not the request: the request may be placed again,
 * and a placement naming that worker is no longer reused (PlacementClient.forget).
 */
export function aboutTheWorker(error: CortexError): boolean {
  return error.code === 'model_not_ready' || RETRYABLE.has(error.code);
}

/**
 * Failures after which a model's `fallback` serves the request: its places failed or cannot take it
 * (none up, no room, busy, its upstream failing or rate limited). Never the request's own fault, nor
 * the client's limits or budget.
 */
export const FALLS_BACK: ReadonlySet<string> = new Set([
  ...RETRYABLE,
  'no_worker',
  'busy',
  'model_load_failed',
  'insufficient_memory',
  'model_not_ready',
]);

/** Everything a retry decision before the first token depends on; no bus, no clock. */
export interface RetryAsk {
  /** What failed the try. */
  error: unknown;
  /** The client went away (or the run was stopped on purpose). */
  cancelled: boolean;
  /** Workers the request was already taken from after they failed it. */
  excluded: number;
  /** Times it was placed again because its model left the worker (see MAX_REPLACEMENTS). */
  replaced: number;
  /** The models still to fall back to, in order (the requested model's `fallback` not tried yet). */
  fallbacks?: readonly string[];
}

export type RetryDecision =
  /** The error stands. */
  | { kind: 'fail'; forget: boolean }
  /**
   * The model just left the worker (swapped out between placement and the command): ask a router again
   * after `delayMs`, the worker not held against.
   */
  | { kind: 'replace'; delayMs: number; forget: true }
  /** The worker failed the request: place it again on another (once). */
  | { kind: 'elsewhere'; forget: true }
  /** The model cannot serve it: the next model of its fallback chain does, from a fresh start. */
  | { kind: 'fallback'; model: string; forget: boolean };

/**
 * Whether a try that failed before the client was given anything is placed again, and how. `forget`:
 * the failure was the worker's, so a placement naming it is no longer reused, whatever is decided.
 * A worker fails a request once: the second worker's failure stands.
 */
export function decideRetry(ask: RetryAsk): RetryDecision {
  const { error } = ask;
  if (!(error instanceof CortexError)) return { kind: 'fail', forget: false };
  const forget = aboutTheWorker(error);
  if (ask.cancelled) return { kind: 'fail', forget };
  if (error.code === 'model_not_ready' && ask.replaced < MAX_REPLACEMENTS)
    return { kind: 'replace', delayMs: 50 * (ask.replaced + 1), forget: true };
  if (ask.excluded === 0 && RETRYABLE.has(error.code)) return { kind: 'elsewhere', forget: true };
  const next = ask.fallbacks?.[0];
  if (next !== undefined && FALLS_BACK.has(error.code)) return { kind: 'fallback', model: next, forget };
  return { kind: 'fail', forget };
}

/**
 * A request's tries before the client was given anything, as decideRetry rules them: the workers
 * excluded so far and the replacements used. `forget` drops a failed worker's reusable placements.
 */
export class Tries {
  exclude: string[] = [];
  private replaced = 0;
  /** What failed the last try placed elsewhere. */
  private failure: unknown;
  /** The models still to fall back to. */
  private readonly fallbacks: string[];

  constructor(
    private readonly forget: (workerId: string) => void,
    fallbacks: readonly string[] = [],
  ) {
    this.fallbacks = [...fallbacks];
  }

  /**
   * The try on `workerId` failed with `error`: resolves once the next try may be placed (saying why
   * there is one), or throws `error` when there is none.
   */
  async after(
    error: unknown,
    workerId: string | null,
    cancelled: boolean,
  ): Promise<'replace' | 'elsewhere' | { fallback: string }> {
    const decision = decideRetry({
      error,
      cancelled,
      excluded: this.exclude.length,
      replaced: this.replaced,
      fallbacks: this.fallbacks,
    });
    if (decision.forget && workerId !== null) this.forget(workerId);
    if (decision.kind === 'fail') throw error;
    if (decision.kind === 'fallback') {
      // The next model starts afresh: its own workers, none excluded, no replacements used.
      this.fallbacks.shift();
      this.exclude = [];
      this.replaced = 0;
      this.failure = undefined;
      return { fallback: decision.model };
    }
    if (workerId === null) throw error;
    if (decision.kind === 'elsewhere') {
      this.exclude.push(workerId);
      this.failure = error;
      return 'elsewhere';
    }
    this.replaced++;
    await new Promise((done) => setTimeout(done, decision.delayMs));
    return 'replace';
  }

  /**
   * How long the next placement may wait for a worker to come up: not at all after a failed try when a
   * fallback is left (it serves now, rather than the client waiting on a place that may never come).
   */
  workerWaitMs(): number | undefined {
    return this.exclude.length > 0 && this.fallbacks.length > 0 ? 0 : undefined;
  }

  /**
   * What the client hears when the next try cannot be placed: with no other worker to go to, the
   * failure of the try before (an upstream's 503, a lost worker), which says more than "no worker".
   */
  placementFailed(error: unknown): unknown {
    return this.failure !== undefined && error instanceof CortexError && error.code === 'no_worker'
      ? this.failure
      : error;
  }
}
