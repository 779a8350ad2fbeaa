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
  | { kind: 'elsewhere'; forget: true };

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
  return { kind: 'fail', forget };
}

/**
 * A request's tries before the client was given anything, as decideRetry rules them: the workers
 * excluded so far and the replacements used. `forget` drops a failed worker's reusable placements.
 */
export class Tries {
  readonly exclude: string[] = [];
  private replaced = 0;
  /** What failed the last try placed elsewhere. */
  private failure: unknown;

  constructor(private readonly forget: (workerId: string) => void) {}

  /**
   * The try on `workerId` failed with `error`: resolves once the next try may be placed (saying why
   * there is one), or throws `error` when there is none.
   */
  async after(error: unknown, workerId: string, cancelled: boolean): Promise<'replace' | 'elsewhere'> {
    const decision = decideRetry({ error, cancelled, excluded: this.exclude.length, replaced: this.replaced });
    if (decision.forget) this.forget(workerId);
    if (decision.kind === 'fail') throw error;
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
   * What the client hears when the next try cannot be placed: with no other worker to go to, the
   * failure of the try before (an upstream's 503, a lost worker), which says more than "no worker".
   */
  placementFailed(error: unknown): unknown {
    return this.failure !== undefined && error instanceof CortexError && error.code === 'no_worker'
      ? this.failure
      : error;
  }
}
