import { CortexError, livenessWindowMs, type CanonicalRequest, type StreamEvent } from '@cortex/contracts';
import { decideMigration } from './migration.decider.js';
import { FALLS_BACK } from './retry.js';
import type { RunAttempts } from './run-attempts.js';
import type { RunNotices } from './run-notices.js';
import type { RunStep } from './run-phase.js';
import type { RunServices } from './run-services.js';
import type { StreamCheckpoint } from './stream-checkpoint.js';

/** The parts of a run its stream is read and moved with (see InferenceRun). */
export interface StreamDeps {
  readonly services: RunServices;
  readonly requestId: string;
  /** The decoded request the run serves. */
  readonly request: CanonicalRequest;
  readonly attempts: RunAttempts;
  readonly checkpoint: StreamCheckpoint;
  readonly notices: RunNotices;
  /** Aborted when the client goes, to end waits that no longer serve anyone. */
  readonly stopped: AbortSignal;
  /** An event handed on to the client, noted by the run (its checkpoint, its outcome). */
  observe(event: StreamEvent): StreamEvent;
  /** Moves the run on by `step` (see InferenceRun.step). */
  step(step: RunStep): void;
}

/**
 * A run's stream past its first token, as the client reads it: from its worker, and from the next
 * place it moves to when that one is lost (see migrate).
 */
export class RunStream {
  /** The workers the stream was lost on: it is never placed on them again. */
  private readonly lost: string[] = [];

  constructor(private readonly deps: StreamDeps) {}

  /**
   * The buffered head, then the rest of the stream, noting the finish for the request-finished event.
   * A worker lost on the way costs the client a pause where the stream may move (see migrate): it goes
   * on from another worker, whose own start event only says where it resumed.
   */
  async *read(head: StreamEvent[], rest: AsyncIterator<StreamEvent>): AsyncIterable<StreamEvent> {
    const { checkpoint, notices } = this.deps;
    for (const event of head) yield this.deps.observe(event);
    for (;;) {
      let next: IteratorResult<StreamEvent>;
      try {
        next = await rest.next();
      } catch (error) {
        rest = await this.migrate(error);
        continue;
      }
      if (next.done) return;
      const event = next.value;
      if (event.type === 'start' && checkpoint.moves > 0) {
        notices.emit({ type: 'resumed', workerId: event.workerId });
        continue;
      }
      // An upstream that failed mid-answer ends its stream with an error: the stream may move as from a lost worker.
      if (event.type === 'error' && event.error.code === 'upstream_unavailable') {
        const failure = CortexError.fromBody(event.error);
        const moved = await this.migrate(failure).catch((error: unknown) => {
          if (error === failure) return null;
          throw error;
        });
        if (moved) {
          rest = moved;
          continue;
        }
      }
      yield this.deps.observe(event);
    }
  }

  /**
   * The stream's place failed after the first token (its worker lost, its upstream failing): where
   * decideMigration allows it, the request is placed again (never on a worker lost before) and goes
   * on from the checkpoint — from its token ids on another copy, or from its text as an answer begun
   * on another place or, with none, the model's next fallback — and the new stream is read in place
   * of the old one. Otherwise, or when no place takes it, `error` stands.
   */
  private async migrate(error: unknown): Promise<AsyncIterator<StreamEvent>> {
    const { services, requestId, request, attempts, checkpoint, notices, stopped } = this.deps;
    const { lost } = this;
    if (!(error instanceof CortexError) || !attempts.placement) throw error;
    const decision = decideMigration({
      error,
      cancelled: stopped.aborted,
      checkpoint: checkpoint.state,
      config: services.config.gateway.migration,
      request,
    });
    const from = attempts.placement.workerId;
    const place = error.code === 'worker_lost' ? `worker ${from}` : `the upstream on worker ${from}`;
    if (!decision.migrate) {
      if (error.code === 'worker_lost' || error.code === 'upstream_unavailable')
        services.logger.warn({
          msg: `${place} was lost mid-stream; the stream does not move: ${decision.reason}`,
          requestId,
        });
      throw error;
    }
    // The next worker counts the delivered output again as it replays it: the lost one is not charged.
    this.deps.step('lost');
    attempts.stopReading(from, `the stream moves to another worker: ${error.message}`, false);
    services.placer.forget(from);
    lost.push(from);
    checkpoint.moved();
    notices.emit({ type: 'moving' });
    attempts.next();
    const resume = decision.from === 'tokens' ? checkpoint.resume() : undefined;
    const prefill = decision.from === 'text' ? checkpoint.prefill() : '';
    // Text goes on in any model: with no other place for this one, its fallbacks are tried in turn.
    const fallbacks = decision.from === 'text' ? attempts.fallbacksLeft(request.model) : [];
    try {
      // The client is already waiting: a live worker briefly declared down (its heartbeats late while it
      // loads a model on a busy host) is waited for one liveness window, not `worker_wait_ms`.
      // With a fallback left, no place for the model now sends the stream on to it at once.
      const window = Math.min(
        services.config.gateway.workerWaitMs,
        livenessWindowMs(services.config.worker.heartbeatMs),
      );
      let workerId: string;
      for (;;) {
        try {
          workerId = await attempts.placeGeneration(request, lost, fallbacks.length > 0 ? 0 : window);
          break;
        } catch (failure) {
          const next = fallbacks.shift();
          if (next === undefined || !(failure instanceof CortexError) || !FALLS_BACK.has(failure.code)) throw failure;
          attempts.fallBack(request.model, { fallback: next }, failure.message);
          // The next model's places are its own: of those that failed, only a lost worker is kept out.
          lost.splice(0, lost.length, ...(error.code === 'worker_lost' ? [from] : []));
        }
      }
      if (stopped.aborted) throw new CortexError('cancelled', 'the request was cancelled while it moved');
      const reader = await attempts.launch(workerId, resume ? request : this.begun(request, prefill), resume);
      this.deps.step('resumed');
      services.logger.warn({
        msg:
          `${place} was lost mid-stream (${error.message}); the stream goes on on ${workerId} after ` +
          (resume ? `${resume.tokens.length} tokens` : `${prefill.length} characters, as an answer begun`),
        requestId,
      });
      return reader[Symbol.asyncIterator]();
    } catch (failure) {
      if (failure instanceof CortexError && failure.code === 'cancelled') throw failure;
      services.logger.warn({
        msg: `${place} was lost mid-stream and no other place went on with it: ${(failure as Error).message}`,
        requestId,
      });
      throw error;
    }
  }

  /** The request going on from the text the client has: an answer begun, its budget less what was given. */
  private begun(request: CanonicalRequest, prefill: string): CanonicalRequest {
    const { maxTokens } = request.sampling;
    const given = this.deps.checkpoint.state.textPieces;
    return {
      ...request,
      prefill: (request.prefill ?? '') + prefill,
      sampling: { ...request.sampling, ...(maxTokens !== undefined && { maxTokens: Math.max(1, maxTokens - given) }) },
    };
  }
}
