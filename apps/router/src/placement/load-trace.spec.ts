import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { context, SpanStatusCode, trace } from '@opentelemetry/api';
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace';
import { activeTracer, flushTraces, startTracing } from '@cortex/bus';
import { CortexError } from '@cortex/contracts';
import { LoadTrace } from './load-trace.js';

describe('load trace', () => {
  const exporter = new InMemorySpanExporter();
  let stop: (() => Promise<void>) | null = null;
  /** Runs `fn` inside a fresh span named `name`, as a placement handler runs inside its process span. */
  const inSpan = async <T>(name: string, fn: () => Promise<T>): Promise<T> => {
    const span = activeTracer()?.startSpan(name);
    assert.ok(span);
    try {
      return await context.with(trace.setSpan(context.active(), span), fn);
    } finally {
      span.end();
    }
  };

  before(async () => {
    assert.equal(
      await LoadTrace.start('m')
        .run(() => Promise.resolve({ workerId: 'w1' }))
        .then((p) => p.workerId),
      'w1',
      'off: just runs',
    );
    stop = await startTracing('router', { OTEL_TRACES_EXPORTER: 'otlp' }, exporter);
  });
  after(async () => {
    await stop?.();
  });

  it('load trace - the load is a child of the placement that started it; a placement that waits for it links to it', async () => {
    exporter.reset();
    let release: () => void = () => undefined;
    const gate = new Promise<void>((done) => (release = done));
    let load: LoadTrace | null = null;
    const first = inSpan('process place (first)', () => {
      load = LoadTrace.start('cortex-chat');
      return load.run(async () => {
        await inSpan('send llm.worker.v1.w1.load', () => gate);
        return { workerId: 'w1' };
      });
    });
    const second = inSpan('process place (second)', async () => {
      (load as LoadTrace | null)?.joined();
      await gate;
    });
    release();
    await Promise.all([first, second]);
    await flushTraces();
    const spans = exporter.getFinishedSpans();
    const byName = (name: string) => spans.find((span) => span.name === name);
    const loadSpan = byName('load cortex-chat');
    assert.ok(loadSpan);
    assert.equal(loadSpan.parentSpanContext?.spanId, byName('process place (first)')?.spanContext().spanId);
    assert.equal(byName('send llm.worker.v1.w1.load')?.parentSpanContext?.spanId, loadSpan.spanContext().spanId);
    assert.equal(loadSpan.attributes['cortex.worker.id'], 'w1');
    assert.deepEqual(
      byName('process place (second)')?.links.map((link) => [link.context.spanId, link.attributes?.['cortex.link']]),
      [[loadSpan.spanContext().spanId, 'waits for load']],
    );
  });

  it('load trace - a failed load fails its span; a load nobody traced starts none', async () => {
    exporter.reset();
    await assert.rejects(
      inSpan('process place', () =>
        LoadTrace.start('m').run(() => Promise.reject(new CortexError('no_worker', 'no worker is up'))),
      ),
    );
    await LoadTrace.start('pinned').run(() => Promise.resolve({ workerId: 'w1' }));
    await flushTraces();
    const loads = exporter.getFinishedSpans().filter((span) => span.name.startsWith('load '));
    assert.deepEqual(
      loads.map((span) => [span.name, span.status.code, span.attributes['error.type']]),
      [['load m', SpanStatusCode.ERROR, 'no_worker']],
    );
  });
});
