import { context, propagation, trace, type Tracer } from '@opentelemetry/api';
import type { SpanExporter } from '@opentelemetry/sdk-trace';

/**
 * OpenTelemetry tracing, configured only by the standard OTEL_* variables. With none set, no SDK is
 * loaded and `activeTracer()` is null: every traced call site checks that one value and does nothing
 * else, so tracing that is off costs a null check.
 */

export type SamplerName =
  | 'always_on'
  | 'always_off'
  | 'traceidratio'
  | 'parentbased_always_on'
  | 'parentbased_always_off'
  | 'parentbased_traceidratio';

export interface TracingSettings {
  exporter: 'otlp' | 'console';
  /** OTLP over HTTP: protobuf (the specification's default) or JSON. */
  protocol: 'http/protobuf' | 'http/json';
  sampler: SamplerName;
  /** The sampler's argument: the ratio of the `traceidratio` samplers. */
  ratio: number;
  /** OTEL_BSP_SCHEDULE_DELAY: how long finished spans wait before they are sent (ms). */
  scheduleDelayMs: number;
  /** OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true: inference spans carry the messages in and out. */
  captureContent: boolean;
}

export class TracingConfigError extends Error {
  override name = 'TracingConfigError';
}

const SAMPLERS: readonly SamplerName[] = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
];

/**
 * Whether and how to trace, from the environment (the OpenTelemetry SDK environment variables):
 * off unless an exporter is asked for (`OTEL_TRACES_EXPORTER`) or an OTLP endpoint is set
 * (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); `OTEL_SDK_DISABLED=true` and
 * `OTEL_TRACES_EXPORTER=none` turn it off. A value cortex cannot honour throws, naming the variable.
 */
export function tracingSettings(env: NodeJS.ProcessEnv): TracingSettings | null {
  const value = (name: string): string | undefined => env[name]?.trim() || undefined;
  if (value('OTEL_SDK_DISABLED')?.toLowerCase() === 'true') return null;
  const exporters = (value('OTEL_TRACES_EXPORTER') ?? '')
    .split(',')
    .map((name) => name.trim().toLowerCase())
    .filter(Boolean);
  if (exporters.includes('none')) return null;
  const endpoint = value('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT') ?? value('OTEL_EXPORTER_OTLP_ENDPOINT');
  if (exporters.length === 0 && !endpoint) return null;
  const unknown = exporters.find((name) => name !== 'otlp' && name !== 'console');
  if (unknown)
    throw new TracingConfigError(`OTEL_TRACES_EXPORTER=${unknown} is not supported: use otlp, console or none`);
  if (exporters.length > 1)
    throw new TracingConfigError(
      `OTEL_TRACES_EXPORTER names ${exporters.length} exporters: cortex sends spans to one (otlp, console or none)`,
    );

  const protocolVariable = value('OTEL_EXPORTER_OTLP_TRACES_PROTOCOL')
    ? 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL'
    : 'OTEL_EXPORTER_OTLP_PROTOCOL';
  const protocol = value(protocolVariable) ?? 'http/protobuf';
  if (protocol !== 'http/protobuf' && protocol !== 'http/json') {
    throw new TracingConfigError(
      `${protocolVariable}=${protocol} is not supported: cortex sends OTLP over HTTP (http/protobuf or http/json)`,
    );
  }
  const sampler = (value('OTEL_TRACES_SAMPLER') ?? 'parentbased_always_on').toLowerCase() as SamplerName;
  if (!SAMPLERS.includes(sampler))
    throw new TracingConfigError(`OTEL_TRACES_SAMPLER=${sampler} is not supported: use one of ${SAMPLERS.join(', ')}`);
  const ratioText = value('OTEL_TRACES_SAMPLER_ARG');
  const ratio = sampler.endsWith('traceidratio') && ratioText !== undefined ? Number(ratioText) : 1;
  if (!(ratio >= 0 && ratio <= 1))
    throw new TracingConfigError(`OTEL_TRACES_SAMPLER_ARG=${ratioText} must be a ratio from 0 to 1`);
  const delayText = value('OTEL_BSP_SCHEDULE_DELAY');
  const scheduleDelayMs = delayText === undefined ? 5_000 : Number(delayText);
  if (!Number.isInteger(scheduleDelayMs) || scheduleDelayMs < 0)
    throw new TracingConfigError(`OTEL_BSP_SCHEDULE_DELAY=${delayText} must be a whole number of milliseconds`);
  const captureContent = value('OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT')?.toLowerCase() === 'true';
  return {
    exporter: exporters[0] === 'console' ? 'console' : 'otlp',
    protocol,
    sampler,
    ratio,
    scheduleDelayMs,
    captureContent,
  };
}

let tracer: Tracer | null = null;
let captureContent = false;
/** The provider's forceFlush while tracing is on. */
let flush: (() => Promise<void>) | null = null;

/** Whether inference spans record message contents (opted in with OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT). */
export function capturingMessageContent(): boolean {
  return tracer !== null && captureContent;
}

/** The tracer of this process, or null when tracing is off (see tracingSettings). */
export function activeTracer(): Tracer | null {
  return tracer;
}

/**
 * The trace and span ids of the span current in this async context, for log lines; null when tracing is off or outside
 * a traced request.
 */
export function currentTraceIds(): { traceId: string; spanId: string } | null {
  if (!tracer) return null;
  const span = trace.getSpan(context.active());
  if (!span) return null;
  const { traceId, spanId } = span.spanContext();
  return { traceId, spanId };
}

/** Sends the spans the SDK still holds (at once; nothing while tracing is off). */
export async function flushTraces(): Promise<void> {
  await flush?.();
}

/**
 * Starts the OpenTelemetry SDK for one service when the environment asks for it: spans go through a
 * batch processor to an OTLP/HTTP exporter (which reads its own endpoint, headers, timeout and TLS
 * variables), W3C trace context and baggage propagate, and the resource says `service.name`
 * cortex-<service> unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise. Returns what
 * to call at shutdown (it sends the spans still held), or null when tracing stays off. The SDK is
 * imported only here, so a process that does not trace never loads it. `env` decides whether and how
 * to trace; the OTLP exporter reads its endpoint, headers and TLS settings from `process.env` itself.
 */
export async function startTracing(
  service: string,
  env: NodeJS.ProcessEnv = process.env,
  exporterForTests?: SpanExporter,
): Promise<(() => Promise<void>) | null> {
  const settings = tracingSettings(env);
  if (!settings) return null;
  const [sdk, resources, core, hooks] = await Promise.all([
    import('@opentelemetry/sdk-trace'),
    import('@opentelemetry/resources'),
    import('@opentelemetry/core'),
    import('@opentelemetry/context-async-hooks'),
  ]);
  const exporter =
    exporterForTests ??
    (settings.exporter === 'console'
      ? new sdk.ConsoleSpanExporter()
      : settings.protocol === 'http/json'
        ? new (await import('@opentelemetry/exporter-trace-otlp-http')).OTLPTraceExporter()
        : new (await import('@opentelemetry/exporter-trace-otlp-proto')).OTLPTraceExporter());
  const ratio = new sdk.TraceIdRatioBasedSampler(settings.ratio);
  const root = { always_on: new sdk.AlwaysOnSampler(), always_off: new sdk.AlwaysOffSampler(), traceidratio: ratio };
  const sampler = settings.sampler.startsWith('parentbased_')
    ? new sdk.ParentBasedSampler({ root: root[settings.sampler.slice('parentbased_'.length) as keyof typeof root] })
    : root[settings.sampler as keyof typeof root];
  const resource = resources
    .resourceFromAttributes({ 'service.name': `cortex-${service}`, 'service.namespace': 'cortex' })
    .merge(
      resources.detectResources({
        detectors: [resources.envDetector, resources.processDetector, resources.hostDetector],
      }),
    );
  const provider = new sdk.TracerProvider({
    resource,
    sampler,
    // A test's exporter sees each span as it ends.
    spanProcessors: [
      exporterForTests
        ? new sdk.SimpleSpanProcessor({ exporter })
        : new sdk.BatchSpanProcessor({ exporter, scheduledDelayMillis: settings.scheduleDelayMs }),
    ],
  });
  context.setGlobalContextManager(new hooks.AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(
    new core.CompositePropagator({
      propagators: [new core.W3CTraceContextPropagator(), new core.W3CBaggagePropagator()],
    }),
  );
  trace.setGlobalTracerProvider(provider);
  tracer = trace.getTracer('cortex');
  captureContent = settings.captureContent;
  flush = () => provider.forceFlush();
  return async () => {
    tracer = null;
    captureContent = false;
    flush = null;
    await provider.shutdown();
  };
}
