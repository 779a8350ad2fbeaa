import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { activeTracer, startTracing, tracingSettings, TracingConfigError, type TracingSettings } from './tracing.js';

const DEFAULTS: TracingSettings = {
  exporter: 'otlp',
  protocol: 'http/protobuf',
  sampler: 'parentbased_always_on',
  ratio: 1,
  scheduleDelayMs: 5_000,
  captureContent: false,
};

describe('tracing settings', () => {
  const cases: Array<[string, NodeJS.ProcessEnv, TracingSettings | null]> = [
    ['nothing set: off (no SDK is loaded)', {}, null],
    ['only a service name: still off', { OTEL_SERVICE_NAME: 'x' }, null],
    [
      'an OTLP endpoint turns it on, protobuf by default',
      { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' },
      DEFAULTS,
    ],
    [
      'the traces endpoint alone does too',
      { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://collector:4318/v1/traces' },
      DEFAULTS,
    ],
    ['an exporter asked for without an endpoint: the exporter default', { OTEL_TRACES_EXPORTER: 'otlp' }, DEFAULTS],
    ['console', { OTEL_TRACES_EXPORTER: 'console' }, { ...DEFAULTS, exporter: 'console' }],
    [
      'none wins over an endpoint',
      { OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' },
      null,
    ],
    ['OTEL_SDK_DISABLED wins over everything', { OTEL_SDK_DISABLED: 'true', OTEL_TRACES_EXPORTER: 'otlp' }, null],
    ['OTEL_SDK_DISABLED=false changes nothing', { OTEL_SDK_DISABLED: 'false', OTEL_TRACES_EXPORTER: 'otlp' }, DEFAULTS],
    [
      'JSON over HTTP',
      { OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' },
      { ...DEFAULTS, protocol: 'http/json' },
    ],
    [
      'the traces protocol wins over the general one',
      {
        OTEL_TRACES_EXPORTER: 'otlp',
        OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc',
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
      },
      { ...DEFAULTS, protocol: 'http/json' },
    ],
    [
      'a ratio sampler with its argument',
      {
        OTEL_TRACES_EXPORTER: 'otlp',
        OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
        OTEL_TRACES_SAMPLER_ARG: '0.25',
      },
      { ...DEFAULTS, sampler: 'parentbased_traceidratio', ratio: 0.25 },
    ],
    [
      'a sampler argument means nothing to always_on',
      { OTEL_TRACES_EXPORTER: 'otlp', OTEL_TRACES_SAMPLER: 'always_on', OTEL_TRACES_SAMPLER_ARG: '0.1' },
      { ...DEFAULTS, sampler: 'always_on' },
    ],
    [
      'the batch delay',
      { OTEL_TRACES_EXPORTER: 'otlp', OTEL_BSP_SCHEDULE_DELAY: '200' },
      { ...DEFAULTS, scheduleDelayMs: 200 },
    ],
    [
      'message contents only when opted in',
      { OTEL_TRACES_EXPORTER: 'otlp', OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'true' },
      { ...DEFAULTS, captureContent: true },
    ],
    [
      'anything but true keeps them out',
      { OTEL_TRACES_EXPORTER: 'otlp', OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: '1' },
      DEFAULTS,
    ],
    ['blank values count as unset', { OTEL_TRACES_EXPORTER: ' ', OTEL_EXPORTER_OTLP_ENDPOINT: '' }, null],
  ];
  for (const [title, env, expected] of cases) {
    it(`tracing settings - ${title}`, () => assert.deepEqual(tracingSettings(env), expected));
  }

  const refused: Array<[string, NodeJS.ProcessEnv, RegExp]> = [
    [
      'gRPC',
      { OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' },
      /^OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported: cortex sends OTLP over HTTP/,
    ],
    ['an exporter cortex lacks', { OTEL_TRACES_EXPORTER: 'zipkin' }, /^OTEL_TRACES_EXPORTER=zipkin is not supported/],
    ['two exporters', { OTEL_TRACES_EXPORTER: 'otlp,console' }, /names 2 exporters/],
    [
      'an unknown sampler',
      { OTEL_TRACES_EXPORTER: 'otlp', OTEL_TRACES_SAMPLER: 'jaeger_remote' },
      /^OTEL_TRACES_SAMPLER=jaeger_remote is not supported/,
    ],
    [
      'a ratio above 1',
      { OTEL_TRACES_EXPORTER: 'otlp', OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '2' },
      /^OTEL_TRACES_SAMPLER_ARG=2 must be a ratio from 0 to 1/,
    ],
    [
      'a ratio that is no number',
      { OTEL_TRACES_EXPORTER: 'otlp', OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: 'half' },
      /^OTEL_TRACES_SAMPLER_ARG=half/,
    ],
    [
      'a delay that is no whole number',
      { OTEL_TRACES_EXPORTER: 'otlp', OTEL_BSP_SCHEDULE_DELAY: '1.5' },
      /^OTEL_BSP_SCHEDULE_DELAY=1\.5 must be a whole number/,
    ],
  ];
  for (const [title, env, message] of refused) {
    it(`tracing settings - refuses ${title}, naming the variable`, () => {
      assert.throws(
        () => tracingSettings(env),
        (error: Error) => error instanceof TracingConfigError && message.test(error.message),
      );
    });
  }
});

describe('startTracing', () => {
  it('startTracing - nothing set: nothing starts', async () => {
    assert.equal(await startTracing('gateway', {}), null);
    assert.equal(activeTracer(), null);
  });

  it(
    'startTracing - with only an endpoint, the real exporter posts ' +
      'OTLP protobuf to <endpoint>/v1/traces, as service cortex-<service>',
    async (t) => {
      const posts: Array<{ url: string; type: string; body: Buffer }> = [];
      const server = createServer((req, res) => {
        const chunks: Buffer[] = [];
        req.on('data', (chunk: Buffer) => chunks.push(chunk));
        req.on('end', () => {
          posts.push({ url: req.url ?? '', type: String(req.headers['content-type']), body: Buffer.concat(chunks) });
          res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
        });
      });
      server.listen(0, '127.0.0.1');
      await once(server, 'listening');
      t.after(() => server.close());
      // The exporter reads its endpoint from the process's environment itself, as in a service.
      process.env.OTEL_EXPORTER_OTLP_ENDPOINT = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      t.after(() => delete process.env.OTEL_EXPORTER_OTLP_ENDPOINT);
      const stop = await startTracing('translator');
      assert.ok(stop);
      const span = activeTracer()?.startSpan('process llm.translator.v1.decode');
      assert.ok(span);
      span.end();
      await stop(); // sends what the batch holds
      assert.equal(activeTracer(), null);
      assert.equal(posts.length, 1);
      const [post] = posts as [(typeof posts)[0]];
      assert.equal(post.url, '/v1/traces');
      assert.equal(post.type, 'application/x-protobuf');
      // Protobuf keeps strings as UTF-8 and ids as raw bytes.
      assert.ok(post.body.includes('process llm.translator.v1.decode'));
      assert.ok(post.body.includes('cortex-translator'));
      assert.ok(post.body.includes(Buffer.from(span.spanContext().traceId, 'hex')));
    },
  );
});
