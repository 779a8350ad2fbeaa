import type { CortexError } from '@cortex/contracts';

/** When a request that failed on a worker is placed again, for generation and retrieval alike. */

/** How often a request is placed again because its model left the worker it was placed on. */
export const MAX_REPLACEMENTS = 3;

/** Failures that say nothing about the request itself, only about the worker that had it. */
export const RETRYABLE: ReadonlySet<string> = new Set(['worker_lost', 'service_unavailable', 'timeout']);

/**
 * A failure about the worker or the model it held, not the request: the request may be placed again,
 * and a placement naming that worker is no longer reused (PlacementClient.forget).
 */
export function aboutTheWorker(error: CortexError): boolean {
  return error.code === 'model_not_ready' || RETRYABLE.has(error.code);
}
