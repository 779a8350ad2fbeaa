import {
  context,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Context,
  type Span,
  type TextMapGetter,
  type TextMapSetter,
} from '@opentelemetry/api';
import { headers as natsHeaders, type MsgHdrs } from '@nats-io/transport-node';
import { CortexError } from '@cortex/contracts';
import { activeTracer } from './tracing.js';

/**
 * W3C trace context on the bus: no OpenTelemetry instrumentation exists for nats.js, so cortex carries
 * `traceparent` (and `tracestate`, `baggage`) in NATS message headers itself, on every request,
 * event and stream message, and opens a span per hop following the messaging conventions
 * (`messaging.system` nats). All of it is skipped while tracing is off (activeTracer() is null).
 */

const setter: TextMapSetter<MsgHdrs> = { set: (headers, key, value) => headers.set(key, value) };
const getter: TextMapGetter<MsgHdrs | undefined> = {
  get: (headers, key) => headers?.get(key) || undefined,
  keys: (headers) => (headers ? headers.keys() : []),
};

/** Writes the trace context of `ctx` into `headers`. */
export function injectTrace(headers: MsgHdrs, ctx: Context = context.active()): void {
  propagation.inject(ctx, headers, setter);
}

/** The trace context a message carries (the root context when it carries none). */
export function extractTrace(headers: MsgHdrs | undefined): Context {
  return propagation.extract(ROOT_CONTEXT, headers, getter);
}

function attributes(subject: string, operation: 'send' | 'receive' | 'process', name: string): Record<string, string> {
  return {
    'messaging.system': 'nats',
    'messaging.destination.name': subject,
    'messaging.operation.type': operation,
    'messaging.operation.name': name,
  };
}

/**
 * Runs a bus request under a client span `send <subject>`, child of the current context, with the
 * span's context written into `headers` so the handler's span becomes its child.
 */
export async function tracedRequest<T>(subject: string, headers: MsgHdrs, send: () => Promise<T>): Promise<T> {
  const tracer = activeTracer();
  // Only requests made for a traced request are traced: heartbeats, status pings and the fleet's
  // housekeeping would otherwise each start a trace of their own.
  if (!tracer || !trace.getSpan(context.active())) return send();
  const span = tracer.startSpan(`send ${subject}`, {
    kind: SpanKind.CLIENT,
    attributes: attributes(subject, 'send', 'request'),
  });
  injectTrace(headers, trace.setSpan(context.active(), span));
  try {
    return await send();
  } catch (error) {
    failSpan(span, error);
    throw error;
  } finally {
    span.end();
  }
}

/** Headers carrying the current trace context; undefined (nothing allocated) when tracing is off or no span is current. */
export function currentTraceHeaders(): MsgHdrs | undefined {
  if (!activeTracer() || !trace.getSpan(context.active())) return undefined;
  const headers = natsHeaders();
  injectTrace(headers);
  return headers;
}

/**
 * Runs a handler under a span `process <subject>` whose parent is the context the message carries:
 * a server span for a request, a consumer span for an event. The handler (and anything it sends)
 * runs in that span's context. A message that carries no trace context is handled untraced.
 */
export async function tracedHandler<T>(
  subject: string,
  headers: MsgHdrs | undefined,
  request: boolean,
  handle: () => Promise<T>,
): Promise<T> {
  const tracer = activeTracer();
  if (!tracer || !headers?.has('traceparent')) return handle();
  const parent = extractTrace(headers);
  const span = tracer.startSpan(
    `process ${subject}`,
    { kind: request ? SpanKind.SERVER : SpanKind.CONSUMER, attributes: attributes(subject, 'process', 'process') },
    parent,
  );
  try {
    return await context.with(trace.setSpan(parent, span), handle);
  } catch (error) {
    failSpan(span, error);
    throw error;
  } finally {
    span.end();
  }
}

/** Marks a span failed: status error, `error.type` the error code, the exception as an event. */
export function failSpan(span: Span, error: unknown): void {
  const code = error instanceof CortexError ? error.code : error instanceof Error ? error.name : 'error';
  span.setAttribute('error.type', code);
  if (error instanceof Error) span.recordException(error);
  span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
}
