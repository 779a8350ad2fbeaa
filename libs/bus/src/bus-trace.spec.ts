import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { context, SpanKind, trace } from '@opentelemetry/api';
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace';
import { headers as natsHeaders } from '@nats-io/transport-node';
import { currentTraceHeaders, extractTrace, tracedHandler, tracedRequest } from './bus-trace.js';
import { activeTracer, flushTraces, startTracing } from './tracing.js';

const TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const PARENT = '00f067aa0ba902b7';

describe('bus trace, tracing off', () => {
  it('bus trace - with tracing off nothing is written or started', async () => {
    assert.equal(activeTracer(), null);
    const headers = natsHeaders();
    assert.equal(await tracedRequest('llm.x', headers, () => Promise.resolve(1)), 1);
    assert.deepEqual(headers.keys(), []);
    assert.equal(currentTraceHeaders(), undefined);
  });
});

describe('bus trace', () => {
  const exporter = new InMemorySpanExporter();
  let stop: (() => Promise<void>) | null = null;

  before(async () => {
    stop = await startTracing('router', { OTEL_TRACES_EXPORTER: 'otlp' }, exporter);
  });
  after(async () => {
    await stop?.();
  });

  it(
    'bus trace - a request and its handler: the send span writes ' +
      'traceparent into the NATS headers, the process span continues it',
    async () => {
      exporter.reset();
      const incoming = natsHeaders();
      incoming.set('traceparent', `00-${TRACE}-${PARENT}-01`);
      const sent = natsHeaders();
      await tracedHandler('llm.router.v1.place', incoming, true, () =>
        tracedRequest('llm.worker.v1.w1.load', sent, () => Promise.resolve()),
      );
      await flushTraces();
      const [send, processed] = [
        exporter.getFinishedSpans().find((s) => s.name === 'send llm.worker.v1.w1.load'),
        exporter.getFinishedSpans().find((s) => s.name === 'process llm.router.v1.place'),
      ];
      assert.ok(send && processed);
      assert.equal(processed.kind, SpanKind.SERVER);
      assert.equal(processed.parentSpanContext?.spanId, PARENT);
      assert.equal(send.kind, SpanKind.CLIENT);
      assert.equal(send.parentSpanContext?.spanId, processed.spanContext().spanId);
      for (const span of [send, processed]) {
        assert.equal(span.spanContext().traceId, TRACE);
        assert.equal(span.attributes['messaging.system'], 'nats');
      }
      assert.equal(send.attributes['messaging.destination.name'], 'llm.worker.v1.w1.load');
      assert.equal(sent.get('traceparent'), `00-${TRACE}-${send.spanContext().spanId}-01`);
      assert.equal(
        trace.getSpanContext(extractTrace(sent))?.spanId,
        send.spanContext().spanId,
        'what one side writes the other reads',
      );
    },
  );

  it('bus trace - traffic outside a traced request (heartbeats, status pings) starts no span and carries no headers', async () => {
    exporter.reset();
    const sent = natsHeaders();
    await tracedRequest('llm.svc.v1.status', sent, () => Promise.resolve());
    await tracedHandler('llm.hb.v1.worker.w1', undefined, false, () => Promise.resolve());
    assert.equal(currentTraceHeaders(), undefined);
    await flushTraces();
    assert.deepEqual(exporter.getFinishedSpans(), []);
    assert.deepEqual(sent.keys(), []);
  });

  it('bus trace - a failed handler fails its span with the error code; an event is a consumer span', async () => {
    exporter.reset();
    const incoming = natsHeaders();
    incoming.set('traceparent', `00-${TRACE}-${PARENT}-01`);
    await assert.rejects(
      tracedHandler('llm.worker.v1.w1.generate', incoming, true, () =>
        Promise.reject(Object.assign(new Error('boom'), { name: 'BoomError' })),
      ),
    );
    await tracedHandler('llm.evt.v1.request.finished', incoming, false, async () => {
      assert.ok(
        currentTraceHeaders()?.get('traceparent').startsWith(`00-${TRACE}-`),
        'what the handler publishes carries the trace on',
      );
      assert.equal(trace.getSpan(context.active())?.spanContext().traceId, TRACE);
    });
    await flushTraces();
    const [failed, event] = exporter.getFinishedSpans();
    assert.equal(failed?.attributes['error.type'], 'BoomError');
    assert.equal(failed?.status.message, 'boom');
    assert.equal(event?.kind, SpanKind.CONSUMER);
  });
});
