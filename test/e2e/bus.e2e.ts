import 'reflect-metadata';
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Controller, Module, type INestMicroservice } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Ctx, EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { Objm } from '@nats-io/obj';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  BusClient,
  BusExceptionFilter,
  BusServer,
  connectBus,
  freePort,
  isBusConnected,
  maxPayload,
  startNatsServer,
  StreamPublisher,
  StreamReader,
  type BusContext,
} from '@cortex/bus';
import {
  CortexError,
  decodePlacement,
  integer,
  object,
  PAYLOAD_BUCKET,
  string,
  type StreamEvent,
} from '@cortex/contracts';
import { startTestNats, waitFor, watchBus, type TestNats } from '@cortex/testing';

const events: unknown[] = [];

@Controller()
class EchoController {
  @MessagePattern('test.echo')
  echo(@Payload() data: unknown, @Ctx() context: BusContext) {
    return { data, requestId: context.requestId ?? null };
  }

  @MessagePattern('test.slow')
  async slow(data: { ms: number; n: number }) {
    await new Promise((done) => setTimeout(done, data.ms));
    return data.n;
  }

  @MessagePattern('test.fail')
  fail(): never {
    throw new CortexError('busy', 'all slots busy', { retryAfter: 3 });
  }

  @MessagePattern('test.crash')
  crash(): never {
    throw new TypeError('boom');
  }

  @MessagePattern('test.worker.{worker}.ping')
  ping() {
    return 'pong';
  }

  @EventPattern('test.event')
  event(data: unknown) {
    events.push(data);
  }
}

@Module({ controllers: [EchoController] })
class EchoModule {}

describe('bus transport', () => {
  let nats: TestNats;
  let nc: NatsConnection;
  let app: INestMicroservice;
  let bus: BusClient;

  before(async () => {
    nats = await startTestNats();
    nc = await connect({ servers: nats.url });
    const serverNc = await connect({ servers: nats.url });
    app = await NestFactory.createMicroservice(EchoModule, {
      strategy: new BusServer({ nc: serverNc, queue: 'test', workerId: 'w1' }),
      logger: false,
    });
    app.useGlobalFilters(new BusExceptionFilter());
    await app.listen();
    bus = new BusClient(nc, 1_000);
  });

  after(async () => {
    await app?.close();
    await nc?.close();
    await nats?.stop();
  });

  it('bus - a request and a reply over max_payload go through the object store, and nothing is left in it', async () => {
    const big = 'x'.repeat(3 * 2 ** 20);
    assert.ok(big.length > maxPayload(nc), 'the test body is over the server limit');
    const reply = await bus.request(
      'test.echo',
      { big },
      { timeoutMs: 10_000, decode: (value) => string(object(object(value, 'echo').data, 'data').big, 'data.big') },
    );
    assert.equal(reply.length, big.length);
    // Each side deletes what it read; the deletes are not awaited, so wait for them.
    const store = await new Objm(nc).open(PAYLOAD_BUCKET);
    await waitFor(async () => (await store.list()).length === 0, 5_000);
  });

  it('bus - a payload too deep to encode is invalid_request, not a crash', async () => {
    let deep: unknown = [];
    for (let i = 0; i < 20_000; i++) deep = [deep];
    await assert.rejects(
      bus.request('test.echo', deep),
      (error: CortexError) => error.code === 'invalid_request' && /nests too deeply/.test(error.message),
    );
  });

  it('bus - request/reply carries data and the x-request-id header', async () => {
    assert.deepEqual(await bus.request('test.echo', { a: 1 }, { requestId: 'req-1' }), {
      data: { a: 1 },
      requestId: 'req-1',
    });
  });

  it('bus - concurrent requests are handled in parallel, not one by one', async () => {
    const started = Date.now();
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, n) =>
        bus.request('test.slow', { ms: 200, n }, { decode: (value) => integer(value, 'n') }),
      ),
    );
    assert.deepEqual(
      results,
      Array.from({ length: 20 }, (_, n) => n),
    );
    assert.ok(Date.now() - started < 2_000, 'twenty 200 ms handlers finish well before 4 s of serial time');
  });

  it('bus - a CortexError keeps its code and retry hint across the bus', async () => {
    await assert.rejects(bus.request('test.fail', {}), (error: Error) => {
      assert.ok(error instanceof CortexError);
      assert.equal(error.code, 'busy');
      assert.equal(error.extra.retryAfter, 3);
      return true;
    });
  });

  it('bus - an unexpected exception becomes internal with its message', async () => {
    await assert.rejects(
      bus.request('test.crash', {}),
      (error: Error) => error instanceof CortexError && error.code === 'internal' && /boom/.test(error.message),
    );
  });

  it('bus - {worker} patterns are bound to the server worker id', async () => {
    assert.equal(await bus.request('test.worker.w1.ping', {}), 'pong');
    await assert.rejects(
      bus.request('test.worker.w2.ping', {}),
      (error: Error) => error instanceof CortexError && error.code === 'service_unavailable',
    );
  });

  it('bus - events reach @EventPattern handlers', async () => {
    bus.publish('test.event', { hello: 'world' });
    await waitFor(() => events.length > 0, 2_000);
    assert.deepEqual(events[0], { hello: 'world' });
  });

  it('bus - no responders is service_unavailable and silence is a timeout', async () => {
    await assert.rejects(
      bus.request('test.nobody', {}),
      (error: Error) => error instanceof CortexError && error.code === 'service_unavailable',
    );
    const sub = nc.subscribe('test.silent', { callback: () => undefined });
    await assert.rejects(
      bus.request('test.silent', {}, { timeoutMs: 200 }),
      (error: Error) => error instanceof CortexError && error.code === 'timeout',
    );
    sub.unsubscribe();
  });

  it("bus - a malformed reply is the replier's internal error naming the field, never a cast", async () => {
    const replies: Record<string, unknown> = {
      'test.raw.envelope': { ok: 'yes', data: {} },
      'test.raw.error': { ok: false, error: { code: 'busy' } },
      'test.raw.placement': { ok: true, data: { model: 'm', workerId: 7, coldStart: false } },
    };
    const subs = Object.entries(replies).map(([subject, reply]) =>
      nc.subscribe(subject, { callback: (_error, msg) => void msg.respond(JSON.stringify(reply)) }),
    );
    try {
      const malformed = (field: string) => (error: Error) =>
        error instanceof CortexError &&
        error.code === 'internal' &&
        error.message.includes('malformed reply') &&
        error.message.includes(field);
      await assert.rejects(bus.request('test.raw.envelope', {}), malformed('ok: must be a boolean'));
      await assert.rejects(bus.request('test.raw.error', {}), malformed('error: must have a string code and message'));
      await assert.rejects(
        bus.request('test.raw.placement', {}, { decode: decodePlacement }),
        malformed('workerId: must be a string'),
      );
    } finally {
      for (const sub of subs) sub.unsubscribe();
    }
  });

  it('bus - a stream arrives in order and ends with its finish event', async () => {
    const reader = new StreamReader(nc, 'test.stream.ok', { idleTimeoutMs: 1_000 });
    reader.arm();
    const publisher = new StreamPublisher(nc, 'test.stream.ok');
    for (const text of ['a', 'b', 'c']) publisher.emit({ type: 'text', text });
    publisher.emit({
      type: 'finish',
      reason: 'stop',
      usage: { promptTokens: 1, cachedPromptTokens: 0, completionTokens: 3, reasoningTokens: 0 },
      timings: { ttftMs: 0, promptMs: 0, decodeTokensPerSecond: 0, durationMs: 0, queueMs: 0 },
    });
    const seen: StreamEvent[] = [];
    for await (const event of reader) seen.push(event);
    assert.deepEqual(
      seen.map((e) => e.seq),
      [0, 1, 2, 3],
    );
    assert.equal(seen.at(-1)?.type, 'finish');
  });

  it('bus - fast deltas are merged per stream interval; the first is never held and order is kept', async () => {
    const reader = new StreamReader(nc, 'test.stream.merge', { idleTimeoutMs: 2_000 });
    reader.arm();
    const publisher = new StreamPublisher(nc, 'test.stream.merge', 50);
    const pieces = ['a', 'b', 'c', 'd', 'e'];
    for (const text of pieces) publisher.emit({ type: 'text', text });
    publisher.emit({ type: 'reasoning', text: 'r' });
    publisher.emit({
      type: 'finish',
      reason: 'stop',
      usage: { promptTokens: 1, cachedPromptTokens: 0, completionTokens: 6, reasoningTokens: 1 },
      timings: { ttftMs: 0, promptMs: 0, decodeTokensPerSecond: 0, durationMs: 0, queueMs: 0 },
    });
    const seen: StreamEvent[] = [];
    for await (const event of reader) seen.push(event);
    assert.deepEqual(
      seen.map((e) => (e.type === 'text' || e.type === 'reasoning' ? `${e.type}:${e.text}` : e.type)),
      ['text:a', 'text:bcde', 'reasoning:r', 'finish'],
    );
    assert.deepEqual(
      seen.map((e) => (e.type === 'text' || e.type === 'reasoning' ? e.pieces : null)),
      [undefined, 4, undefined, null],
      'a merged delta counts its pieces',
    );
    assert.deepEqual(
      seen.map((e) => e.seq),
      [0, 1, 2, 3],
    );
  });

  it('bus - a merged delta carries the token ids of all its pieces, in order; a piece without ids adds none', async () => {
    const reader = new StreamReader(nc, 'test.stream.tokens', { idleTimeoutMs: 2_000 });
    reader.arm();
    const publisher = new StreamPublisher(nc, 'test.stream.tokens', 50);
    publisher.emit({ type: 'text', text: 'a', tokens: [1] });
    publisher.emit({ type: 'text', text: 'b', tokens: [2, 3] });
    publisher.emit({ type: 'text', text: 'c' });
    publisher.emit({ type: 'text', text: 'd', tokens: [4] });
    publisher.emit({ type: 'tool_call', index: 0, id: 'call_1', name: 'f', tokens: [5] });
    publisher.emit({
      type: 'finish',
      reason: 'stop',
      usage: { promptTokens: 1, cachedPromptTokens: 0, completionTokens: 5, reasoningTokens: 0 },
      timings: { ttftMs: 0, promptMs: 0, decodeTokensPerSecond: 0, durationMs: 0, queueMs: 0 },
    });
    const seen: StreamEvent[] = [];
    for await (const event of reader) seen.push(event);
    assert.deepEqual(
      seen.map((e) => (e.type === 'text' || e.type === 'tool_call' ? [e.type, e.tokens] : [e.type])),
      [['text', [1]], ['text', [2, 3, 4]], ['tool_call', [5]], ['finish']],
    );
  });

  it('bus - a silent stream sends keep-alives that hold the reader, and none after its finish', async () => {
    const reader = new StreamReader(nc, 'test.stream.alive', { idleTimeoutMs: 600 });
    reader.arm();
    const publisher = new StreamPublisher(nc, 'test.stream.alive', 0, 100);
    const finish = {
      type: 'finish',
      reason: 'stop',
      usage: { promptTokens: 1, cachedPromptTokens: 0, completionTokens: 1, reasoningTokens: 0 },
      timings: { ttftMs: 0, promptMs: 0, decodeTokensPerSecond: 0, durationMs: 0, queueMs: 0 },
    } as const;
    // Silent for more than two idle timeouts: only the keep-alives keep the reader from failing.
    setTimeout(() => publisher.emit({ type: 'text', text: 'late' }), 1_500);
    setTimeout(() => publisher.emit(finish), 1_700);
    const seen: StreamEvent[] = [];
    for await (const event of reader) seen.push(event);
    assert.ok(seen.filter((e) => e.type === 'keepalive').length >= 4, seen.map((e) => e.type).join(', '));
    assert.deepEqual(
      seen.slice(-1).map((e) => e.type),
      ['finish'],
    );
    assert.deepEqual(
      seen.map((e) => e.seq),
      seen.map((_e, i) => i),
    );
    const after = await watchBus<StreamEvent>(nc, 'test.stream.alive');
    await new Promise((done) => setTimeout(done, 300));
    await after.stop();
    assert.deepEqual(after.messages, [], 'the finish stopped the keep-alives');
  });

  it('bus - a gap in sequence numbers fails the stream', async () => {
    const reader = new StreamReader(nc, 'test.stream.gap', { idleTimeoutMs: 1_000 });
    reader.arm();
    nc.publish('test.stream.gap', JSON.stringify({ seq: 0, type: 'text', text: 'a' }));
    nc.publish('test.stream.gap', JSON.stringify({ seq: 2, type: 'text', text: 'c' }));
    await assert.rejects(
      async () => {
        for await (const _event of reader) {
          // consume
        }
      },
      (error: Error) =>
        error instanceof CortexError && error.code === 'worker_lost' && /expected event 1, got 2/.test(error.message),
    );
  });

  it('bus - a malformed stream event fails the stream naming the field, after the good events before it', async () => {
    const reader = new StreamReader(nc, 'test.stream.bad', { idleTimeoutMs: 1_000 });
    reader.arm();
    nc.publish('test.stream.bad', JSON.stringify({ seq: 0, type: 'text', text: 'a' }));
    nc.publish('test.stream.bad', JSON.stringify({ seq: 1, type: 'tool_call', index: 0, id: 'c1', name: 42 }));
    const seen: StreamEvent[] = [];
    await assert.rejects(
      async () => {
        for await (const event of reader) seen.push(event);
      },
      (error: Error) =>
        error instanceof CortexError &&
        error.code === 'internal' &&
        /bad event: name: must be a string/.test(error.message),
    );
    assert.deepEqual(seen, [{ seq: 0, type: 'text', text: 'a' }]);
  });

  it('bus - a producer that dies mid-stream is detected by the idle timeout, not a hang', async () => {
    const reader = new StreamReader(nc, 'test.stream.dead', { idleTimeoutMs: 300 });
    reader.arm();
    const publisher = new StreamPublisher(nc, 'test.stream.dead');
    publisher.emit({ type: 'text', text: 'first and last' });
    const started = Date.now();
    const seen: StreamEvent[] = [];
    await assert.rejects(
      async () => {
        for await (const event of reader) seen.push(event);
      },
      (error: Error) => error instanceof CortexError && error.code === 'worker_lost',
    );
    assert.equal(seen.length, 1);
    assert.ok(Date.now() - started < 3_000);
  });

  it('bus - connection state follows the server going away and coming back', async () => {
    const port = await freePort();
    const storeDir = mkdtempSync(join(tmpdir(), 'cortex-nats-bounce-'));
    let server = await startNatsServer({ port, storeDir });
    const client = await connectBus({ url: server.url, name: 'bounce' });
    try {
      assert.equal(isBusConnected(client), true);
      await server.stop();
      await waitFor(() => !isBusConnected(client), 5_000);
      server = await startNatsServer({ port, storeDir });
      await waitFor(() => isBusConnected(client), 10_000);
    } finally {
      await client.close();
      await server.stop();
    }
  });
});
