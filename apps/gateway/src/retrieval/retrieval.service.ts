import { Injectable } from '@nestjs/common';
import { CortexError, Subjects, workerSubject, type ModelKind, type RetrievalApi } from '@cortex/contracts';
import { Tries } from '../inference/retry.js';
import { InferenceService } from '../inference/inference.service.js';
import { toCortexError } from '../http/error-response.js';
import type { RequestContext } from '../http/request-context.js';

/** One try of the work on the worker placed, for the catalogue id of the model (not an alias); `runId` is what a cancel names. */
export type RetrievalCall<T> = (placed: { workerId: string; model: string }, runId: string) => Promise<T>;

/**
 * Embeddings and rerank requests: placed through the router like any request (a cold load included),
 * then one request/reply to the worker. A worker that fails before answering costs the client
 * nothing: the request goes to another worker once. Each request publishes one request-finished
 * event under its API, so metrics count requests, tokens and latency per endpoint.
 */
@Injectable()
export class RetrievalService {
  constructor(readonly inference: InferenceService) {}

  /** The work's result; `tokens` reads its prompt tokens for usage and metrics. */
  async run<T>(
    api: RetrievalApi,
    context: RequestContext,
    target: { model: string; kind: ModelKind },
    call: RetrievalCall<T>,
    tokens: (result: T) => number,
    closed: AbortSignal,
  ): Promise<T> {
    const requestId = context.id;
    const run = this.inference.open(api, context);
    const onClose = (): void => run.cancel('client disconnected');
    closed.addEventListener('abort', onClose, { once: true });
    const tries = new Tries((workerId) => this.inference.placer.forget(workerId));
    try {
      for (;;) {
        const { workerId, model } = await run.placeFor(target.model, target.kind, tries.exclude);
        if (closed.aborted) throw new CortexError('cancelled', 'the client went away while the request was placed');
        const cancel = (): void =>
          this.inference.bus.publish(
            workerSubject(Subjects.workerCancel, workerId),
            { runId: run.runId, reason: 'client disconnected' },
            requestId,
          );
        closed.addEventListener('abort', cancel, { once: true });
        try {
          const result = await run.traced(() => call({ workerId, model }, run.runId));
          run.answered(tokens(result));
          return result;
        } catch (error) {
          if ((await tries.after(error, workerId, closed.aborted)) === 'elsewhere')
            this.inference.logger.warn({
              msg: `worker ${workerId} failed (${(error as Error).message}); placing the request again`,
              requestId,
            });
        } finally {
          closed.removeEventListener('abort', cancel);
        }
      }
    } catch (error) {
      run.fail(toCortexError(error), false);
      throw error;
    } finally {
      closed.removeEventListener('abort', onClose);
      run.finish();
    }
  }

  /** Asks a worker, bounded like a placement: a large batch on a slow device takes a while. */
  ask<T>(
    workerId: string,
    pattern: string,
    command: object,
    requestId: string,
    decode: (value: unknown) => T,
  ): Promise<T> {
    return this.inference.bus.request(workerSubject(pattern, workerId), command, {
      requestId,
      decode,
      timeoutMs: this.inference.config.gateway.placementTimeoutMs,
    });
  }
}
