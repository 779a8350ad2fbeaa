import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { dirname, join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import WebSocket from 'ws';
import { fixtureModel } from '@cortex/fixtures';
import { startStack, waitFor, type TestStack } from '@cortex/testing';

// Traces through separate service processes, exported by the real OpenTelemetry SDK over OTLP/HTTP
// (JSON) to a receiver inside this test, which decodes every export request it gets.

const chat = fixtureModel('cortex-chat');
const EVERYTHING = join(
  dirname(createRequire(import.meta.url).resolve('@modelcontextprotocol/server-everything/package.json')),
  'dist/index.js',
);
const CLIENT = 3; // OTLP SpanKind: SPAN_KIND_CLIENT
const SERVICES = ['router', 'translator', 'metrics', 'worker', 'gateway'];
const SERVER = 2; // OTLP SpanKind: SPAN_KIND_SERVER
const user = [{ role: 'user' as const, content: 'Say hello.' }];

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
  boolValue?: boolean;
  arrayValue?: { values?: OtlpValue[] };
}
interface OtlpKeyValue {
  key: string;
  value: OtlpValue;
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  startTimeUnixNano: string;
  endTimeUnixNano: string;
  attributes?: OtlpKeyValue[];
  events?: Array<{ name: string }>;
  links?: Array<{ traceId: string; spanId: string; attributes?: OtlpKeyValue[] }>;
}
interface OtlpExport {
  resourceSpans?: Array<{ resource?: { attributes?: OtlpKeyValue[] }; scopeSpans?: Array<{ spans?: OtlpSpan[] }> }>;
}

/** A span as received, with its service and decoded attributes. */
interface SeenSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  service: string;
  /** Start and end, in ms since the epoch. */
  start: number;
  end: number;
  attributes: Record<string, unknown>;
  events: string[];
  links: Array<{ traceId: string; spanId: string; attributes: Record<string, unknown> }>;
}

function decodeValue(value: OtlpValue): unknown {
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.doubleValue !== undefined) return value.doubleValue;
  if (value.boolValue !== undefined) return value.boolValue;
  if (value.arrayValue) return (value.arrayValue.values ?? []).map(decodeValue);
  return undefined;
}

function decodeAttributes(list: OtlpKeyValue[] = []): Record<string, unknown> {
  return Object.fromEntries(list.map(({ key, value }) => [key, decodeValue(value)]));
}

/** An OTLP/HTTP traces endpoint: `POST /v1/traces` with an OTLP/JSON body. */
class OtlpReceiver {
  readonly spans: SeenSpan[] = [];
  readonly contentTypes = new Set<string>();
  private readonly server: Server;

  constructor() {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        if (req.method !== 'POST' || req.url !== '/v1/traces') {
          res.writeHead(404).end();
          return;
        }
        this.contentTypes.add(String(req.headers['content-type']));
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as OtlpExport;
        for (const resourceSpans of body.resourceSpans ?? []) {
          const service = String(decodeAttributes(resourceSpans.resource?.attributes)['service.name']);
          for (const scope of resourceSpans.scopeSpans ?? []) {
            for (const span of scope.spans ?? []) {
              this.spans.push({
                traceId: span.traceId,
                spanId: span.spanId,
                parentSpanId: span.parentSpanId ?? '',
                name: span.name,
                kind: span.kind,
                service,
                start: Number(BigInt(span.startTimeUnixNano) / 1000n) / 1000,
                end: Number(BigInt(span.endTimeUnixNano) / 1000n) / 1000,
                attributes: decodeAttributes(span.attributes),
                events: (span.events ?? []).map((event) => event.name),
                links: (span.links ?? []).map((link) => ({
                  traceId: link.traceId,
                  spanId: link.spanId,
                  attributes: decodeAttributes(link.attributes),
                })),
              });
            }
          }
        }
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
  }

  async listen(): Promise<string> {
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  close(): Promise<void> {
    return new Promise((done) => this.server.close(() => done()));
  }

  trace(traceId: string): SeenSpan[] {
    return this.spans.filter((span) => span.traceId === traceId);
  }

  /** The trace of the request the gateway knows as `requestId`, once its span arrived (bounded). */
  async traceOfRequest(requestId: string): Promise<string> {
    let traceId = '';
    await waitFor(() => {
      traceId =
        this.spans.find((s) => s.service === 'cortex-gateway' && s.attributes['cortex.request_id'] === requestId)
          ?.traceId ?? '';
      return traceId !== '';
    }, 15_000);
    return traceId;
  }

  /** The trace's spans once `complete` holds for them (bounded). */
  async waitForTrace(traceId: string, complete: (spans: SeenSpan[]) => boolean): Promise<SeenSpan[]> {
    await waitFor(() => complete(this.trace(traceId)), 15_000).catch(() => {
      throw new Error(
        `trace ${traceId} incomplete: ${JSON.stringify(this.trace(traceId).map((s) => `${s.service}: ${s.name}`))}`,
      );
    });
    return this.trace(traceId);
  }
}

/** The one span named `name` in `service`. */
function only(spans: SeenSpan[], service: string, name: string | RegExp): SeenSpan {
  const found = spans.filter(
    (span) => span.service === service && (typeof name === 'string' ? span.name === name : name.test(span.name)),
  );
  assert.equal(
    found.length,
    1,
    `one span ${String(name)} in ${service}; the trace has ${JSON.stringify(spans.map((s) => `${s.service}: ${s.name}`))}`,
  );
  return found[0] as SeenSpan;
}

/**
 * One connected trace: every span's parent is in the trace, except the gateway's request span,
 * whose parent is the caller's span (`clientSpanId`) or none.
 */
function assertConnected(spans: SeenSpan[], clientSpanId: string): SeenSpan {
  const ids = new Set(spans.map((span) => span.spanId));
  assert.equal(ids.size, spans.length, 'no span is exported twice');
  const roots = spans.filter((span) => !ids.has(span.parentSpanId));
  assert.equal(
    roots.length,
    1,
    `one root; found ${JSON.stringify(roots.map((s) => `${s.service}: ${s.name} (parent ${s.parentSpanId || 'none'})`))}`,
  );
  const root = roots[0] as SeenSpan;
  assert.equal(root.service, 'cortex-gateway');
  assert.equal(root.kind, SERVER);
  assert.equal(root.parentSpanId, clientSpanId);
  for (const span of spans.filter((s) => s.name.startsWith('send ') || s.name.startsWith('process '))) {
    assert.equal(
      span.attributes['messaging.system'],
      'nats',
      `${span.service}: ${span.name} follows the messaging conventions`,
    );
    assert.equal(span.attributes['messaging.destination.name'], span.name.slice(span.name.indexOf(' ') + 1));
  }
  return root;
}

/** A trace as an indented tree (children by start time), for the test's diagnostics and docs/deployment.md. */
function formatTree(spans: SeenSpan[]): string {
  const ids = new Set(spans.map((span) => span.spanId));
  const lines: string[] = [];
  const walk = (span: SeenSpan, depth: number): void => {
    const usage =
      span.attributes['gen_ai.usage.input_tokens'] === undefined
        ? ''
        : `  in=${String(span.attributes['gen_ai.usage.input_tokens'])} out=${String(span.attributes['gen_ai.usage.output_tokens'])}`;
    lines.push(
      `${'  '.repeat(depth)}${span.name}  (${span.service}, ${(span.end - span.start).toFixed(1)} ms)${usage}`,
    );
    for (const child of spans.filter((s) => s.parentSpanId === span.spanId).sort((a, b) => a.start - b.start))
      walk(child, depth + 1);
  };
  for (const root of spans.filter((span) => !ids.has(span.parentSpanId))) walk(root, 0);
  return lines.join('\n');
}

/** The parent of `span` in `spans`. */
function parentOf(spans: SeenSpan[], span: SeenSpan): SeenSpan | undefined {
  return spans.find((candidate) => candidate.spanId === span.parentSpanId);
}

/** The worker's side: generate handled under the gateway's send span, the GenAI span under it. */
function assertWorkerHop(spans: SeenSpan[], attempt: SeenSpan): SeenSpan {
  const childrenOf = (span: SeenSpan): SeenSpan[] => spans.filter((s) => s.parentSpanId === span.spanId);
  const [send, ...moreSends] = childrenOf(attempt).filter((s) =>
    /^send llm\.worker\.v1\.[^.]+\.generate$/.test(s.name),
  );
  assert.ok(send && moreSends.length === 0, 'the try sent one generate request');
  const [processed, ...moreProcessed] = childrenOf(send);
  assert.ok(processed && moreProcessed.length === 0, 'one worker handled it');
  assert.equal(processed.service, 'cortex-worker');
  assert.match(processed.name, /^process llm\.worker\.v1\.[^.]+\.generate$/);
  const generation = only(childrenOf(processed), 'cortex-worker', 'chat cortex-chat');
  assert.ok(generation.events.includes('gen_ai.first_chunk'));
  assert.ok(Number(generation.attributes['gen_ai.response.time_to_first_chunk']) > 0);
  return generation;
}

/** Token counts as the client was told them; `input` counts cached prompt tokens too, as the GenAI conventions ask. */
function assertUsage(span: SeenSpan, usage: { input: number; output: number; cached?: number }, finish: string): void {
  assert.equal(span.attributes['gen_ai.operation.name'], 'chat');
  assert.equal(span.attributes['gen_ai.request.model'], 'cortex-chat');
  assert.equal(span.attributes['gen_ai.response.model'], 'cortex-chat');
  assert.equal(
    span.attributes['gen_ai.usage.input_tokens'],
    usage.input,
    `${span.service}: input tokens as the client was told`,
  );
  assert.equal(
    span.attributes['gen_ai.usage.output_tokens'],
    usage.output,
    `${span.service}: output tokens as the client was told`,
  );
  if (usage.cached !== undefined)
    assert.equal(
      span.attributes['gen_ai.usage.cache_read.input_tokens'],
      usage.cached,
      `${span.service}: cached input tokens as the client was told`,
    );
  assert.deepEqual(span.attributes['gen_ai.response.finish_reasons'], [finish]);
}

/** The JSON log lines about one request: each must name the request's trace. */
function logLines(stack: TestStack, requestId: string): Array<{ service: string; traceId?: string; msg: string }> {
  return stack
    .logs()
    .split('\n')
    .filter((line) => line.startsWith('{') && line.includes(requestId))
    .map((line) => JSON.parse(line) as { service: string; traceId?: string; msg: string; requestId?: string })
    .filter((line) => line.requestId === requestId);
}

function newTraceparent(): { traceId: string; spanId: string; header: string } {
  const traceId = randomBytes(16).toString('hex');
  const spanId = randomBytes(8).toString('hex');
  return { traceId, spanId, header: `00-${traceId}-${spanId}-01` };
}

describe('tracing e2e', () => {
  const receiver = new OtlpReceiver();
  let stack: TestStack;

  before(async () => {
    const endpoint = await receiver.listen();
    const env = {
      OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_BSP_SCHEDULE_DELAY: '50',
    };
    stack = await startStack({
      models: [
        { id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: 1024 },
        { id: 'cortex-reasoning', file: 'fixture:cortex-reasoning', context_size: 1024 },
        { id: 'cortex-embed', file: 'fixture:cortex-embed', kind: 'embedding', context_size: 128 },
        { id: 'cortex-tools-echo', file: 'fixture:cortex-tools-echo', context_size: 4096 },
      ],
      config: {
        log_level: 'info',
        mcp: { servers: [{ label: 'everything', command: process.execPath, args: [EVERYTHING, 'stdio'] }] },
      },
      serviceEnv: Object.fromEntries(SERVICES.map((name) => [name, env])),
    });
  });

  after(async () => {
    await stack?.stop();
    await receiver.close();
  });

  it("tracing - a streamed chat continues the caller's traceparent through gateway, router and worker in one connected trace", async (t) => {
    const client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    const caller = newTraceparent();
    const { data: stream, response } = await client.chat.completions
      .create(
        { model: 'cortex-chat', messages: user, stream: true, stream_options: { include_usage: true } },
        { headers: { traceparent: caller.header } },
      )
      .withResponse();
    let text = '';
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      usage = chunk.usage ?? usage;
    }
    assert.equal(text, chat.expected.text);
    assert.ok(usage);
    const requestId = response.headers.get('x-request-id') ?? '';

    const spans = await receiver.waitForTrace(
      caller.traceId,
      (seen) =>
        seen.some((s) => s.service === 'cortex-gateway' && s.name === 'chat cortex-chat') &&
        seen.some((s) => s.service === 'cortex-worker' && s.name === 'chat cortex-chat'),
    );
    const root = assertConnected(spans, caller.spanId);
    t.diagnostic(`one streamed chat that waited for a cold load:\n${formatTree(spans)}`);
    assert.equal(root.name, 'chat cortex-chat');
    assert.equal(root.attributes['cortex.request_id'], requestId);
    assert.equal(root.attributes['gen_ai.request.stream'], true);
    assert.ok(Number(root.attributes['gen_ai.response.time_to_first_chunk']) > 0);
    assert.deepEqual(
      new Set(spans.map((s) => s.service)),
      new Set(['cortex-gateway', 'cortex-router', 'cortex-worker']),
    );
    // Not opted in to message contents: no span carries them.
    assert.ok(
      spans.every(
        (s) =>
          s.attributes['gen_ai.input.messages'] === undefined && s.attributes['gen_ai.output.messages'] === undefined,
      ),
    );

    // gateway → router: the placement. The suite's first request finds the model unloaded: it waits
    // for a cold load, asking the routers again every two seconds, and a router loads the model.
    assert.equal(root.attributes['cortex.cold_start'], true);
    const places = spans.filter((s) => s.service === 'cortex-gateway' && s.name === 'send llm.router.v1.place');
    assert.ok(places.length >= 1);
    for (const place of places) {
      assert.equal(parentOf(spans, place)?.spanId, root.spanId);
      const handled = spans.filter((s) => s.parentSpanId === place.spanId);
      assert.deepEqual(
        handled.map((s) => `${s.service}: ${s.name}`),
        ['cortex-router: process llm.router.v1.place'],
      );
    }
    const loads = spans.filter(
      (s) => s.service === 'cortex-router' && /^send llm\.worker\.v1\.[^.]+\.load$/.test(s.name),
    );
    assert.ok(loads.length >= 1, 'the router asked a worker to load the model');
    const loadSpan = only(spans, 'cortex-router', 'load cortex-chat');
    assert.equal(parentOf(spans, loadSpan)?.name, 'process llm.router.v1.place');
    for (const load of loads) {
      assert.equal(load.parentSpanId, loadSpan.spanId, 'the load request belongs to the load');
      assert.deepEqual(
        spans
          .filter((s) => s.parentSpanId === load.spanId)
          .map((s) => `${s.service}: ${s.name.replace(/v1\.[^.]+\./, 'v1.<id>.')}`),
        ['cortex-worker: process llm.worker.v1.<id>.load'],
      );
    }
    // gateway → worker: one try, the generation under it.
    const attempt = only(spans, 'cortex-gateway', 'generate cortex-chat');
    assert.equal(attempt.parentSpanId, root.spanId);
    assert.equal(attempt.attributes['cortex.attempt'], 1);
    const generation = assertWorkerHop(spans, attempt);

    const told = {
      input: usage.prompt_tokens,
      output: usage.completion_tokens,
      cached: usage.prompt_tokens_details?.cached_tokens ?? 0,
    };
    assert.equal(told.output, chat.completionTokens);
    assertUsage(root, told, 'stop');
    assertUsage(generation, told, 'stop');

    // Every log line about the request, in the gateway and the worker, names its trace.
    const lines = logLines(stack, requestId);
    const services = new Set(lines.map((line) => line.service));
    assert.ok(services.has('gateway') && services.has('worker'), JSON.stringify(lines));
    for (const line of lines) assert.equal(line.traceId, caller.traceId, `${line.service}: ${line.msg}`);
  });

  it('tracing - an Anthropic stream without a traceparent starts a trace of its own, connected end to end', async () => {
    const client = new Anthropic({ baseURL: stack.baseUrl, apiKey: 'unused', maxRetries: 0 });
    const requestId = `req_trace_${randomBytes(6).toString('hex')}`;
    const stream = client.messages.stream(
      { model: 'cortex-chat', max_tokens: 64, messages: user },
      { headers: { 'x-request-id': requestId } },
    );
    const message = await stream.finalMessage();
    assert.equal((message.content[0] as Anthropic.TextBlock).text, chat.expected.text);

    const traceId = await receiver.traceOfRequest(requestId);
    const spans = await receiver.waitForTrace(traceId, (seen) =>
      seen.some((s) => s.service === 'cortex-worker' && s.name === 'chat cortex-chat'),
    );
    const root = assertConnected(spans, '');
    assert.equal(root.name, 'chat cortex-chat');
    assert.equal(root.attributes['cortex.api'], 'anthropic.messages');
    const generation = assertWorkerHop(spans, only(spans, 'cortex-gateway', 'generate cortex-chat'));
    // Anthropic counts cached prompt tokens apart from input_tokens.
    const cached = message.usage.cache_read_input_tokens ?? 0;
    const told = { input: message.usage.input_tokens + cached, output: message.usage.output_tokens, cached };
    assertUsage(root, told, 'stop');
    assertUsage(generation, told, 'stop');
    for (const line of logLines(stack, requestId)) assert.equal(line.traceId, traceId, `${line.service}: ${line.msg}`);
  });

  it('tracing - a Responses request with previous_response_id goes through the translator in the same trace', async () => {
    const client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    const first = await client.responses.create({ model: 'cortex-chat', input: 'Hi!' });
    const caller = newTraceparent();
    const next = await client.responses.create(
      { model: 'cortex-chat', input: 'Again!', previous_response_id: first.id },
      { headers: { traceparent: caller.header } },
    );
    assert.equal(next.output_text, chat.expected.text);
    assert.ok(next.usage);

    const spans = await receiver.waitForTrace(
      caller.traceId,
      (seen) =>
        seen.some((s) => s.service === 'cortex-gateway' && s.name === 'chat cortex-chat') &&
        seen.some((s) => s.service === 'cortex-worker' && s.name === 'chat cortex-chat'),
    );
    const root = assertConnected(spans, caller.spanId);
    const decode = only(spans, 'cortex-gateway', 'send llm.translator.v1.decode');
    assert.equal(decode.parentSpanId, root.spanId);
    assert.equal(only(spans, 'cortex-translator', 'process llm.translator.v1.decode').parentSpanId, decode.spanId);
    const generation = assertWorkerHop(spans, only(spans, 'cortex-gateway', 'generate cortex-chat'));
    const told = {
      input: next.usage.input_tokens,
      output: next.usage.output_tokens,
      cached: next.usage.input_tokens_details.cached_tokens,
    };
    assertUsage(root, told, 'stop');
    assertUsage(generation, told, 'stop');
  });

  it("tracing - a background response runs on after the reply, in the caller's trace", async () => {
    const client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    const caller = newTraceparent();
    const queued = await client.responses.create(
      { model: 'cortex-chat', input: 'Hi!', background: true },
      { headers: { traceparent: caller.header } },
    );
    assert.equal(queued.status, 'queued');
    let done = queued;
    await waitFor(async () => (done = await client.responses.retrieve(queued.id)).status === 'completed', 15_000);
    assert.equal(done.output_text, chat.expected.text);
    assert.ok(done.usage);

    const spans = await receiver.waitForTrace(
      caller.traceId,
      (seen) =>
        seen.some((s) => s.service === 'cortex-gateway' && s.name === 'chat cortex-chat') &&
        seen.some((s) => s.service === 'cortex-worker' && s.name === 'chat cortex-chat'),
    );
    const root = assertConnected(spans, caller.spanId);
    const generation = assertWorkerHop(spans, only(spans, 'cortex-gateway', 'generate cortex-chat'));
    assert.equal(generation.attributes['cortex.background'], true);
    const told = {
      input: done.usage.input_tokens,
      output: done.usage.output_tokens,
      cached: done.usage.input_tokens_details.cached_tokens,
    };
    assertUsage(root, told, 'stop');
    assertUsage(generation, told, 'stop');
  });

  it('tracing - two requests wait for one cold load: the trace that started it holds the load, the other links to it', async () => {
    const client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    const callers = [newTraceparent(), newTraceparent()];
    const replies = await Promise.all(
      callers.map((caller) =>
        client.chat.completions.create(
          { model: 'cortex-reasoning', messages: user },
          { headers: { traceparent: caller.header } },
        ),
      ),
    );
    for (const reply of replies) assert.equal(reply.choices[0]?.finish_reason, 'stop');

    const complete = (seen: SeenSpan[]): boolean =>
      seen.some((s) => s.service === 'cortex-gateway' && s.name === 'chat cortex-reasoning') &&
      seen.some((s) => s.service === 'cortex-worker' && s.name === 'chat cortex-reasoning');
    const traces = await Promise.all(callers.map((caller) => receiver.waitForTrace(caller.traceId, complete)));
    traces.forEach((spans, i) => assertConnected(spans, callers[i]?.spanId ?? ''));
    const holder = traces.findIndex((spans) => spans.some((s) => s.name === 'load cortex-reasoning'));
    assert.notEqual(holder, -1, 'one trace holds the load');
    const [load, ...more] = (traces[holder] ?? []).filter((s) => s.name === 'load cortex-reasoning');
    assert.ok(load && more.length === 0, 'the model loaded once');
    assert.equal(load.service, 'cortex-router');
    assert.equal(parentOf(traces[holder] ?? [], load)?.name, 'process llm.router.v1.place');
    assert.ok(
      (traces[holder] ?? []).some(
        (s) => s.parentSpanId === load.spanId && /^send llm\.worker\.v1\.[^.]+\.load$/.test(s.name),
      ),
      'the load request to the worker is its child',
    );
    const other = traces[1 - holder] ?? [];
    assert.ok(!other.some((s) => s.name.startsWith('load ')), 'the other request started no load');
    const linked = other.filter((s) =>
      s.links.some((link) => link.traceId === load.traceId && link.spanId === load.spanId),
    );
    assert.deepEqual(
      linked.map((s) => `${s.service}: ${s.name}`),
      ['cortex-router: process llm.router.v1.place'],
    );
    assert.equal(linked[0]?.links[0]?.attributes['cortex.link'], 'waits for load');
  });

  it("tracing - each turn on a Responses WebSocket is a request of its own, continuing the socket's traceparent", async () => {
    const caller = newTraceparent();
    const socketId = `req_ws_${randomBytes(6).toString('hex')}`;
    const ws = new WebSocket(`${stack.baseUrl.replace('http', 'ws')}/v1/responses`, {
      headers: { traceparent: caller.header, 'x-request-id': socketId },
    });
    const events: Array<{
      type: string;
      response?: {
        id: string;
        usage: { input_tokens: number; output_tokens: number; input_tokens_details: { cached_tokens: number } };
      };
    }> = [];
    ws.on('message', (data: Buffer) => events.push(JSON.parse(data.toString('utf8')) as (typeof events)[0]));
    await once(ws, 'open');
    const turn = async (body: Record<string, unknown>): Promise<NonNullable<(typeof events)[0]['response']>> => {
      const from = events.length;
      ws.send(JSON.stringify({ type: 'response.create', ...body }));
      await waitFor(
        () => events.slice(from).some((event) => event.type === 'response.completed' || event.type === 'error'),
        15_000,
      );
      const done = events.slice(from).find((event) => event.type === 'response.completed');
      assert.ok(done?.response, JSON.stringify(events.slice(from).at(-1)));
      return done.response;
    };
    const first = await turn({ model: 'cortex-chat', input: 'Hi!' });
    const second = await turn({ model: 'cortex-chat', input: 'Again!', previous_response_id: first.id });
    ws.close();

    const turns = [`${socketId}.1`, `${socketId}.2`];
    const spans = await receiver.waitForTrace(
      caller.traceId,
      (seen) =>
        turns.every((id) => seen.some((s) => s.attributes['cortex.request_id'] === id)) &&
        seen.filter((s) => s.service === 'cortex-worker' && s.name === 'chat cortex-chat').length === 2,
    );
    const ids = new Set(spans.map((s) => s.spanId));
    const roots = spans.filter((s) => !ids.has(s.parentSpanId));
    assert.deepEqual(
      roots.map((s) => [s.name, s.parentSpanId, s.attributes['cortex.request_id']]).sort(),
      turns.map((id) => ['chat cortex-chat', caller.spanId, id]),
    );
    [first, second].forEach((response, i) => {
      const root = roots.find((s) => s.attributes['cortex.request_id'] === turns[i]) as SeenSpan;
      const subtree = (span: SeenSpan): SeenSpan[] => [
        span,
        ...spans.filter((s) => s.parentSpanId === span.spanId).flatMap(subtree),
      ];
      const own = subtree(root);
      const generation = assertWorkerHop(own, only(own, 'cortex-gateway', 'generate cortex-chat'));
      const told = {
        input: response.usage.input_tokens,
        output: response.usage.output_tokens,
        cached: response.usage.input_tokens_details.cached_tokens,
      };
      assertUsage(root, told, 'stop');
      assertUsage(generation, told, 'stop');
    });
  });

  it("tracing - an embeddings request: the worker's embed call joins the request's trace, with the input tokens", async () => {
    const client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    const caller = newTraceparent();
    const result = await client.embeddings.create(
      { model: 'cortex-embed', input: ['Hello there', 'General Kenobi'] },
      { headers: { traceparent: caller.header } },
    );
    assert.equal(result.data.length, 2);
    const spans = await receiver.waitForTrace(
      caller.traceId,
      (seen) =>
        seen.some((s) => s.name === 'embeddings cortex-embed') &&
        seen.some((s) => s.service === 'cortex-worker' && /\.embed$/.test(s.name)),
    );
    const root = assertConnected(spans, caller.spanId);
    assert.equal(root.name, 'embeddings cortex-embed');
    assert.equal(root.attributes['gen_ai.operation.name'], 'embeddings');
    assert.equal(root.attributes['gen_ai.usage.input_tokens'], result.usage.prompt_tokens);
    const send = only(spans, 'cortex-gateway', /^send llm\.worker\.v1\.[^.]+\.embed$/);
    assert.equal(send.parentSpanId, root.spanId);
    assert.equal(only(spans, 'cortex-worker', /^process llm\.worker\.v1\.[^.]+\.embed$/).parentSpanId, send.spanId);
  });

  it('tracing - a response that runs an MCP tool: both model turns and the tool call (MCP conventions) in one trace', async () => {
    const client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    const requestId = `req_trace_${randomBytes(6).toString('hex')}`;
    const response = await client.responses.create(
      {
        model: 'cortex-tools-echo',
        input: 'Say Paris back to me.',
        tools: [{ type: 'mcp', server_label: 'everything', allowed_tools: ['echo'], require_approval: 'never' }],
      } as never,
      { headers: { 'x-request-id': requestId } },
    );
    assert.deepEqual(
      (response as OpenAI.Responses.Response).output.map((item) => item.type),
      ['mcp_list_tools', 'mcp_call', 'message'],
    );
    const traceId = await receiver.traceOfRequest(requestId);
    const spans = await receiver.waitForTrace(
      traceId,
      (seen) =>
        seen.some((span) => span.name === 'tools/call echo') &&
        seen.filter((span) => span.service === 'cortex-worker' && span.name === 'chat cortex-tools-echo').length === 2,
    );
    assertConnected(spans, '');
    const call = only(spans, 'cortex-gateway', 'tools/call echo');
    assert.equal(call.kind, CLIENT);
    assert.equal(call.attributes['mcp.method.name'], 'tools/call');
    assert.equal(call.attributes['gen_ai.tool.name'], 'echo');
    assert.equal(call.attributes['gen_ai.operation.name'], 'execute_tool');
    assert.equal(call.attributes['network.transport'], 'pipe');
    // The call runs between the turns: after the first's generation ended, before the second's began.
    const turns = spans
      .filter((span) => span.service === 'cortex-worker' && span.name === 'chat cortex-tools-echo')
      .sort((a, b) => a.start - b.start);
    assert.ok(turns[0]!.end <= call.start + 1 && call.end <= turns[1]!.start + 1, formatTree(spans));
  });

  it('tracing - the real exporter sent OTLP/JSON, as OTEL_EXPORTER_OTLP_PROTOCOL asked', () => {
    assert.deepEqual([...receiver.contentTypes], ['application/json']);
  });
});

describe('tracing e2e - failover', () => {
  const receiver = new OtlpReceiver();
  let stack: TestStack;

  before(async () => {
    const endpoint = await receiver.listen();
    const env = {
      OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_BSP_SCHEDULE_DELAY: '50',
    };
    stack = await startStack({
      services: ['router', 'worker', 'gateway'],
      models: [{ id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: 1024, pinned: true }],
      // Slow heartbeats: the router still believes in a killed worker for seconds, as after a real crash.
      config: { worker: { id: 'w1', heartbeat_ms: 2_000 } },
      serviceEnv: Object.fromEntries(['router', 'worker', 'gateway'].map((name) => [name, env])),
    });
    stack.spawnService('worker', { CORTEX_WORKER_ID: 'w2' });
    await stack.workersUp(2);
  });

  after(async () => {
    await stack?.stop();
    await receiver.close();
  });

  it('tracing - a worker killed before the request reaches it: the failed try and the one that succeeds are sibling spans of one trace', async () => {
    await waitFor(
      async () =>
        (await stack.fleet())?.workers.some(
          (w) => w.workerId === 'w1' && w.models.some((m) => m.id === 'cortex-chat' && m.state === 'ready'),
        ) ?? false,
      30_000,
    );
    stack.processes.get('worker')?.kill('SIGKILL');
    const client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    const caller = newTraceparent();
    const reply = await client.chat.completions.create(
      { model: 'cortex-chat', messages: user },
      { headers: { traceparent: caller.header } },
    );
    assert.equal(reply.choices[0]?.message.content, chat.expected.text);
    assert.ok(reply.usage);

    const spans = await receiver.waitForTrace(
      caller.traceId,
      (seen) =>
        seen.some((s) => s.service === 'cortex-gateway' && s.name === 'chat cortex-chat') &&
        seen.some((s) => s.service === 'cortex-worker' && s.name === 'chat cortex-chat'),
    );
    const root = assertConnected(spans, caller.spanId);
    const tries = spans
      .filter((s) => s.service === 'cortex-gateway' && s.name === 'generate cortex-chat')
      .sort((a, b) => a.start - b.start);
    assert.deepEqual(
      tries.map((s) => [s.attributes['cortex.attempt'], s.attributes['cortex.worker.id']]),
      [
        [1, 'w1'],
        [2, 'w2'],
      ],
    );
    for (const attempt of tries) assert.equal(attempt.parentSpanId, root.spanId);
    assert.ok(
      ['service_unavailable', 'worker_lost', 'timeout'].includes(String(tries[0]?.attributes['error.type'])),
      `the first try failed: ${String(tries[0]?.attributes['error.type'])}`,
    );
    assert.equal(tries[1]?.attributes['error.type'], undefined);
    // The first try's generate went to the dead worker: no process answered it.
    const deadSend = spans.find(
      (s) => s.parentSpanId === tries[0]?.spanId && s.name === 'send llm.worker.v1.w1.generate',
    );
    assert.ok(deadSend, 'the first try sent generate to w1');
    assert.deepEqual(
      spans.filter((s) => s.parentSpanId === deadSend.spanId),
      [],
    );
    // Only the second try reached a worker; its generation carries the usage the client got.
    const generation = assertWorkerHop(spans, tries[1] as SeenSpan);
    assert.equal(generation.attributes['cortex.worker.id'], 'w2');
    const told = { input: reply.usage.prompt_tokens, output: reply.usage.completion_tokens };
    assertUsage(root, told, 'stop');
    assertUsage(generation, told, 'stop');
  });
});
