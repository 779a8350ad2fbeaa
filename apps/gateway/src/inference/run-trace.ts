import { performance } from 'node:perf_hooks';
import {
  context,
  propagation,
  SpanKind,
  SpanStatusCode,
  trace,
  type Context,
  type Span,
  type Tracer,
} from '@opentelemetry/api';
import { activeTracer, failSpan, genAiOperation, genAiRequestAttributes, genAiResponseAttributes } from '@cortex/bus';
import type { CanonicalRequest, Dialect, Placement, RequestFinishedEvent, RetrievalApi } from '@cortex/contracts';

/** HTTP request headers as Node gives them. */
export type IncomingHeaders = Record<string, string | string[] | undefined>;

interface Live {
  tracer: Tracer;
  /** The request's span (`chat <model>`, a server span) and its context. */
  span: Span;
  ctx: Context;
  api: Dialect | RetrievalApi;
  /** When the span opened (performance.now), for the time to the first token. */
  openedAt: number;
  /** Named `<operation> <model>` yet (at decode). */
  named: boolean;
  /** The current try on a worker (`generate <model>`), a child of the request's span; one per try. */
  attempt: { span: Span; ctx: Context } | null;
  attempts: number;
}

/**
 * The tracing of one inference request in the gateway, held by its InferenceRun and called at named
 * points: decoded, each try on a worker (a child span per try, so a retry or a failover shows as a
 * second try), the first token, and the finish with the GenAI usage. The request's span continues
 * the client's `traceparent` (or starts a trace), and the run's bus requests are made in its context,
 * so the translator's, router's and worker's spans join the same trace. While tracing is off every
 * call does nothing and `run` only calls its function.
 */
export class RunTrace {
  /** The trace of a request when tracing is off (or of runs made without one). */
  static readonly off = new RunTrace(null);

  private constructor(private readonly live: Live | null) {}

  /**
   * Opens the request's span: the child of the `traceparent` in `headers` when there is one, else of
   * the current context (a request the gateway makes inside another, such as a compaction's summary).
   */
  static open(api: Dialect | RetrievalApi, requestId: string, headers?: IncomingHeaders): RunTrace {
    const tracer = activeTracer();
    if (!tracer) return RunTrace.off;
    const parent = headers ? propagation.extract(context.active(), headers) : context.active();
    const operation = genAiOperation(api);
    const span = tracer.startSpan(
      operation,
      {
        kind: SpanKind.SERVER,
        attributes: { 'gen_ai.operation.name': operation, 'cortex.api': api, 'cortex.request_id': requestId },
      },
      parent,
    );
    return new RunTrace({
      tracer,
      span,
      ctx: trace.setSpan(parent, span),
      api,
      openedAt: performance.now(),
      named: false,
      attempt: null,
      attempts: 0,
    });
  }

  /** The request's trace id (null while tracing is off). */
  get traceId(): string | null {
    return this.live?.span.spanContext().traceId ?? null;
  }

  /** Runs `fn` in the request's context (in the current try's, during one): bus requests it makes become child spans. */
  run<T>(fn: () => T): T {
    const live = this.live;
    if (!live) return fn();
    return context.with(live.attempt?.ctx ?? live.ctx, fn);
  }

  /** The request is decoded: the span takes its GenAI name (`chat <model>`) and request attributes. */
  decoded(request: CanonicalRequest): void {
    const live = this.live;
    if (!live) return;
    const operation = genAiOperation(live.api, request);
    live.named = true;
    live.span.updateName(`${operation} ${request.model}`);
    live.span.setAttributes(genAiRequestAttributes(operation, request));
  }

  /** A try on a worker begins (the first, or again after a failure): its own child span. */
  attempt(placement: Placement): void {
    const live = this.live;
    if (!live) return;
    live.attempts++;
    const span = live.tracer.startSpan(
      `generate ${placement.model}`,
      {
        kind: SpanKind.INTERNAL,
        attributes: {
          'cortex.attempt': live.attempts,
          'cortex.worker.id': placement.workerId,
          'cortex.cold_start': placement.coldStart,
        },
      },
      live.ctx,
    );
    live.attempt = { span, ctx: trace.setSpan(live.ctx, span) };
  }

  /** The current try failed before its first token; the request may be placed again. */
  attemptFailed(error: unknown): void {
    const attempt = this.live?.attempt;
    if (!attempt || !this.live) return;
    failSpan(attempt.span, error);
    attempt.span.end();
    this.live.attempt = null;
  }

  /** The first token arrived from the worker. */
  firstToken(): void {
    const live = this.live;
    if (!live) return;
    live.span.addEvent('gen_ai.first_chunk');
    live.span.setAttribute('gen_ai.response.time_to_first_chunk', (performance.now() - live.openedAt) / 1000);
  }

  /** A request that emits no request-finished event (a token count) is over: its spans end, failed when `error` is given. */
  ended(error?: unknown): void {
    const live = this.live;
    if (!live) return;
    if (error !== undefined) failSpan(live.span, error);
    live.attempt?.span.end();
    live.attempt = null;
    live.span.end();
  }

  /** The request is over: GenAI usage and finish on the request's span, then both spans end. */
  finished(event: RequestFinishedEvent): void {
    const live = this.live;
    if (!live) return;
    const span = live.span;
    // A request with no decoded body (embeddings, rerank) is named for its model only now.
    if (!live.named) span.updateName(`${genAiOperation(live.api)} ${event.model}`);
    span.setAttributes(genAiResponseAttributes(event.model, event.usage, event.finishReason));
    span.setAttributes({ 'http.response.status_code': event.status, 'cortex.cold_start': event.coldStart });
    if (event.workerId) span.setAttribute('cortex.worker.id', event.workerId);
    if (event.errorCode) {
      span.setAttribute('error.type', event.errorCode);
      span.setStatus({ code: SpanStatusCode.ERROR, message: event.errorCode });
      if (live.attempt) live.attempt.span.setStatus({ code: SpanStatusCode.ERROR, message: event.errorCode });
    }
    live.attempt?.span.end();
    live.attempt = null;
    span.end();
  }
}
