import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { context, ProxyTracerProvider, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { InMemorySpanExporter, TracerProvider, type ReadableSpan } from '@opentelemetry/sdk-trace';
import { startTracing } from '@cortex/bus';
import { CortexError, type CanonicalRequest, type RequestFinishedEvent } from '@cortex/contracts';
import { RunTrace } from './run-trace.js';

const request = {
  model: 'cortex-chat',
  messages: [{ role: 'user', content: 'hi' }],
  sampling: { maxTokens: 32 },
  stream: true,
} as unknown as CanonicalRequest;
const finished: RequestFinishedEvent = {
  requestId: 'req_1',
  model: 'cortex-chat',
  workerId: 'w2',
  dialect: 'openai.chat',
  stream: true,
  status: 200,
  errorCode: null,
  finishReason: 'stop',
  usage: { promptTokens: 12, cachedPromptTokens: 4, completionTokens: 7, reasoningTokens: 0 },
  timings: null,
  durationMs: 40,
  finishedAt: 0,
  coldStart: false,
  placeMs: 1,
};
const CALLER = { traceId: '0af7651916cd43dd8448eb211c80319c', spanId: 'b7ad6b7169203331' };

describe('run trace, tracing off', () => {
  it('run trace - with tracing off, open gives the trace that does nothing, and run only calls its function', () => {
    const run = RunTrace.open('openai.chat', 'req_0', { traceparent: `00-${CALLER.traceId}-${CALLER.spanId}-01` });
    assert.equal(run, RunTrace.off);
    assert.equal(run.traceId, null);
    assert.equal(
      run.run(() => 42),
      42,
    );
    run.decoded(request);
    run.finished(finished);
  });
});

describe('run trace', () => {
  const exporter = new InMemorySpanExporter();
  let stop: (() => Promise<void>) | null = null;
  const spans = (): ReadableSpan[] => exporter.getFinishedSpans();
  const named = (name: string): ReadableSpan[] => spans().filter((span) => span.name === name);
  /** Ended spans reach the exporter once the resource's attributes are known: wait for them. */
  const flushed = async (): Promise<void> => {
    const provider = trace.getTracerProvider();
    const sdk = provider instanceof ProxyTracerProvider ? provider.getDelegate() : provider;
    assert.ok(sdk instanceof TracerProvider);
    await sdk.forceFlush();
  };

  before(async () => {
    stop = await startTracing('gateway', { OTEL_TRACES_EXPORTER: 'otlp' }, exporter);
  });
  after(async () => {
    await stop?.();
  });

  it(
    "run trace - continues the caller's traceparent; a try that fails and " +
      'one that succeeds are sibling spans; the finish carries the GenAI usage',
    async () => {
      exporter.reset();
      const run = RunTrace.open('openai.chat', 'req_1', { traceparent: `00-${CALLER.traceId}-${CALLER.spanId}-01` });
      assert.equal(run.traceId, CALLER.traceId);
      run.decoded(request);
      const seen: string[] = [];
      run.attempt({ model: 'cortex-chat', workerId: 'w1', coldStart: true });
      run.run(() => seen.push(trace.getSpan(context.active())?.spanContext().spanId ?? 'none'));
      run.attemptFailed(new CortexError('worker_lost', 'w1 went away'));
      run.attempt({ model: 'cortex-chat', workerId: 'w2', coldStart: false });
      run.firstToken();
      run.finished(finished);
      await flushed();

      const [root] = named('chat cortex-chat');
      assert.ok(root);
      assert.equal(root.kind, SpanKind.SERVER);
      assert.equal(root.spanContext().traceId, CALLER.traceId);
      assert.equal(root.parentSpanContext?.spanId, CALLER.spanId);
      assert.equal(root.attributes['gen_ai.request.model'], 'cortex-chat');
      assert.equal(root.attributes['gen_ai.request.max_tokens'], 32);
      assert.equal(root.attributes['gen_ai.usage.input_tokens'], 12);
      assert.equal(root.attributes['gen_ai.usage.output_tokens'], 7);
      assert.equal(root.attributes['gen_ai.usage.cache_read.input_tokens'], 4);
      assert.deepEqual(root.attributes['gen_ai.response.finish_reasons'], ['stop']);
      assert.equal(root.attributes['http.response.status_code'], 200);
      assert.equal(root.attributes['cortex.worker.id'], 'w2');
      assert.ok(root.events.some((event) => event.name === 'gen_ai.first_chunk'));
      assert.equal(typeof root.attributes['gen_ai.response.time_to_first_chunk'], 'number');

      const tries = named('generate cortex-chat');
      assert.deepEqual(
        tries.map((span) => [span.attributes['cortex.attempt'], span.attributes['cortex.worker.id'], span.status.code]),
        [
          [1, 'w1', SpanStatusCode.ERROR],
          [2, 'w2', SpanStatusCode.UNSET],
        ],
      );
      assert.equal(tries[0]?.attributes['error.type'], 'worker_lost');
      for (const span of tries) assert.equal(span.parentSpanContext?.spanId, root.spanContext().spanId);
      assert.deepEqual(seen, [tries[0]?.spanContext().spanId], 'run() works in the current try');
    },
  );

  it(
    'run trace - without a traceparent the request starts a ' +
      'trace; a failed request marks its span with the error code',
    async () => {
      exporter.reset();
      const run = RunTrace.open('anthropic.messages', 'req_2', {});
      assert.notEqual(run.traceId, CALLER.traceId);
      run.decoded(request);
      run.attempt({ model: 'cortex-chat', workerId: 'w1', coldStart: false });
      run.finished({
        ...finished,
        dialect: 'anthropic.messages',
        status: 503,
        errorCode: 'no_worker',
        finishReason: 'error',
        usage: null,
      });
      await flushed();
      const [root] = named('chat cortex-chat');
      assert.ok(root);
      assert.equal(root.parentSpanContext, undefined);
      assert.equal(root.status.code, SpanStatusCode.ERROR);
      assert.equal(root.attributes['error.type'], 'no_worker');
      assert.equal(root.attributes['gen_ai.usage.input_tokens'], undefined);
      assert.equal(
        named('generate cortex-chat')[0]?.status.code,
        SpanStatusCode.ERROR,
        'the try that was under way failed with it',
      );
    },
  );

  it('run trace - a request with no decoded body (embeddings) is named for its model at the finish', async () => {
    exporter.reset();
    const run = RunTrace.open('openai.embeddings', 'req_4');
    run.finished({
      ...finished,
      model: 'cortex-embed',
      dialect: 'openai.embeddings',
      finishReason: 'stop',
      usage: { promptTokens: 5, cachedPromptTokens: 0, completionTokens: 0, reasoningTokens: 0 },
    });
    await flushed();
    const [span] = named('embeddings cortex-embed');
    assert.equal(span?.attributes['gen_ai.operation.name'], 'embeddings');
    assert.equal(span?.attributes['gen_ai.usage.input_tokens'], 5);
  });

  it('run trace - a legacy completion is a text_completion span', async () => {
    exporter.reset();
    const run = RunTrace.open('openai.completions', 'req_3');
    run.decoded({ ...request, raw: { text: 'Once upon' } });
    run.finished({ ...finished, dialect: 'openai.completions' });
    await flushed();
    assert.equal(named('text_completion cortex-chat')[0]?.attributes['gen_ai.operation.name'], 'text_completion');
  });
});
