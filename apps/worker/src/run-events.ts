import { CortexError, type StreamEventBody } from '@cortex/contracts';
import type { EngineEvent } from './engine/index.js';
import { soonOrFirst } from './soon-or-first.js';

/**
 * A background run this worker stopped itself (a shutdown, an unload), when nobody asked for it: its
 * end is a failure its client must hear of, so that it can create the response again, and not a
 * cancellation (which reads as one the client asked for). Every other event passes as it is.
 */
export function backgroundStop(
  event: StreamEventBody,
  run: { readonly background: boolean; readonly asked: boolean; readonly workerId: string; readonly reason: unknown },
): StreamEventBody {
  if (event.type !== 'finish' || event.reason !== 'cancelled' || !run.background || run.asked) return event;
  const why = run.reason instanceof Error ? run.reason.message : 'stopped';
  return {
    type: 'error',
    error: new CortexError(
      'worker_lost',
      `worker ${run.workerId} stopped this background response (${why}); create it again`,
    ).toBody(),
  };
}

export interface RunEventsOptions {
  readonly runId: string;
  readonly workerId: string;
  readonly background: boolean;
  /** Whether someone (a client, a gateway) asked to cancel the run. */
  readonly asked: () => boolean;
  /** The run's abort signal: its reason says why the worker stopped it. */
  readonly signal: AbortSignal;
  /** Where each event goes, in this order (the trace, then the stream). */
  readonly sinks: ReadonlyArray<(event: StreamEventBody) => void>;
  /** The run finished (the worker logs it). */
  readonly finished: (event: Extract<StreamEventBody, { type: 'finish' }>) => void;
}

/**
 * One run's events on their way out of the worker, in one place: the engine's start gets the run's
 * and the worker's ids, a background run the worker stopped itself ends in an error (backgroundStop),
 * and nothing is sent after the run's finish or error.
 */
export class RunEvents {
  private done = false;

  constructor(private readonly options: RunEventsOptions) {}

  readonly emit = (from: EngineEvent): void => {
    if (this.done) return;
    const { runId, workerId, background, asked, signal, sinks, finished } = this.options;
    // Only a finish can turn into an error: a token's event passes without a look at the run.
    const event =
      from.type === 'start'
        ? { ...from, runId, workerId }
        : from.type === 'finish'
          ? backgroundStop(from, { background, asked: asked(), workerId, reason: signal.reason })
          : from;
    if (event.type === 'finish' || event.type === 'error') this.done = true;
    if (event.type === 'finish') finished(event);
    for (const sink of sinks) sink(event);
  };
}

/**
 * A run's stream with its start event sent on the next turn of the event loop, or at once before
 * any later event: the start is published (encoded and written to the bus's socket) while the model
 * evaluates the prompt, not before the evaluation begins. Every event keeps its order.
 */
export function startSoon(send: (event: StreamEventBody) => void): (event: StreamEventBody) => void {
  let start: (() => void) | null = null;
  return (event) => {
    if (event.type === 'start') {
      start = soonOrFirst(() => send(event));
      return;
    }
    start?.();
    start = null;
    send(event);
  };
}
