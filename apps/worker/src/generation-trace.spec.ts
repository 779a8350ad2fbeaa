import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { context, SpanStatusCode, trace } from '@opentelemetry/api';
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace';
import { activeTracer, flushTraces, startTracing } from '@cortex/bus';
import type { GenerateCommand } from '@cortex/contracts';
import { GenerationTrace } from './generation-trace.js';

const command = {
  runId: 'run1',
  streamSubject: 'llm.stream.v1.w1.run1',
  request: {
    model: 'chat-alias',
    messages: [{ role: 'user', content: 'hi' }],
    sampling: { temperature: 0 },
    stream: true,
  },
} as unknown as GenerateCommand;
const timings = { ttftMs: 5, promptMs: 2, decodeTokensPerSecond: 900, durationMs: 9, queueMs: 1 };

describe('generation trace', () => {
  const exporter = new InMemorySpanExporter();
  let stop: (() => Promise<void>) | null = null;

  before(async () => {
    const off = GenerationTrace.start(command, 'w1', 'cortex-chat', performance.now());
    assert.equal(
      off.run(() => 7),
      7,
      'off: run only calls',
    );
    off.event({
      type: 'finish',
      reason: 'stop',
      usage: { promptTokens: 1, cachedPromptTokens: 0, completionTokens: 1, reasoningTokens: 0 },
      timings,
    });
    stop = await startTracing(
      'worker',
      { OTEL_TRACES_EXPORTER: 'otlp', OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'true' },
      exporter,
    );
  });
  after(async () => {
    await stop?.();
  });

  it(
    'generation trace - a child of the generate span: time to first ' +
      'chunk at the first output, usage and finish of the model that ran',
    async () => {
      exporter.reset();
      const parent = activeTracer()?.startSpan('process llm.worker.v1.w1.generate');
      assert.ok(parent);
      const generation = context.with(trace.setSpan(context.active(), parent), () =>
        GenerationTrace.start(command, 'w1', 'cortex-chat', performance.now()),
      );
      parent.end();
      const inside = generation.run(() => trace.getSpan(context.active())?.spanContext().spanId);
      generation.event({ type: 'start', runId: 'run1', workerId: 'w1' } as never);
      generation.event({ type: 'keepalive' });
      generation.event({ type: 'text', text: 'Hello' });
      generation.event({ type: 'text', text: ' there' });
      generation.event({
        type: 'finish',
        reason: 'stop',
        usage: { promptTokens: 12, cachedPromptTokens: 10, completionTokens: 4, reasoningTokens: 1 },
        timings,
      });
      generation.end();
      await flushTraces();
      const [span, ...more] = exporter.getFinishedSpans().filter((s) => s.name === 'chat chat-alias');
      assert.ok(span && more.length === 0, 'one span, ended once');
      assert.equal(inside, span.spanContext().spanId);
      assert.equal(span.parentSpanContext?.spanId, parent.spanContext().spanId);
      assert.deepEqual(
        span.events.map((event) => event.name),
        ['gen_ai.first_chunk'],
      );
      assert.equal(typeof span.attributes['gen_ai.response.time_to_first_chunk'], 'number');
      assert.equal(span.attributes['gen_ai.request.model'], 'chat-alias');
      assert.equal(span.attributes['gen_ai.response.model'], 'cortex-chat');
      assert.equal(span.attributes['gen_ai.request.temperature'], 0);
      assert.equal(span.attributes['gen_ai.usage.input_tokens'], 12);
      assert.equal(span.attributes['gen_ai.usage.output_tokens'], 4);
      assert.equal(span.attributes['gen_ai.usage.cache_read.input_tokens'], 10);
      assert.equal(span.attributes['gen_ai.usage.reasoning.output_tokens'], 1);
      assert.deepEqual(span.attributes['gen_ai.response.finish_reasons'], ['stop']);
      assert.equal(span.attributes['cortex.worker.id'], 'w1');
      // Opted in: the messages in and the answer out.
      assert.deepEqual(JSON.parse(String(span.attributes['gen_ai.input.messages'])), [
        { role: 'user', parts: [{ type: 'text', content: 'hi' }] },
      ]);
      assert.deepEqual(JSON.parse(String(span.attributes['gen_ai.output.messages'])), [
        { role: 'assistant', parts: [{ type: 'text', content: 'Hello there' }], finish_reason: 'stop' },
      ]);
    },
  );

  it('generation trace - an error event fails the span with its code', async () => {
    exporter.reset();
    const parent = activeTracer()?.startSpan('process generate');
    assert.ok(parent);
    const generation = context.with(trace.setSpan(context.active(), parent), () =>
      GenerationTrace.start(command, 'w1', 'cortex-chat', performance.now()),
    );
    parent.end();
    generation.event({
      type: 'error',
      error: { code: 'context_length_exceeded', message: 'the prompt is 2000 tokens; the context holds 1024' },
    } as never);
    await flushTraces();
    const span = exporter.getFinishedSpans().find((s) => s.name === 'chat chat-alias');
    assert.equal(span?.status.code, SpanStatusCode.ERROR);
    assert.equal(span?.attributes['error.type'], 'context_length_exceeded');
    assert.equal(span?.attributes['gen_ai.usage.input_tokens'], undefined);
  });
});
