import { after, before, describe, it, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import WebSocket from 'ws';
import { Subjects } from '@cortex/contracts';
import { postJson, scrapeMetrics, startStack, waitFor, watchBus, type TestStack } from '@cortex/testing';

const ADMIN = 'sk-admin-hostile';
const HONEST = 'sk-honest';
/** A key of the config file: no limits of its own. */
const UNLIMITED = 'sk-unlimited';
/** Attackers connect from another loopback address, so the per-address caps count them apart from the honest client. */
const ATTACKER_ADDRESS = '127.0.0.2';
const MIB = 2 ** 20;

/** The largest a TCP socket buffer may grow to on this host (`net.ipv4.tcp_wmem`/`tcp_rmem`'s maximum), or `fallback`. */
function kernelBufferMax(name: 'tcp_wmem' | 'tcp_rmem', fallback: number): number {
  try {
    const max = Number(readFileSync(`/proc/sys/net/ipv4/${name}`, 'utf8').trim().split(/\s+/)[2]);
    return Number.isFinite(max) && max > 0 ? max : fallback;
  } catch {
    return fallback;
  }
}
const BODY_LIMIT = 8 * MIB;
const REQUEST_TIMEOUT_MS = 3_000;

/**
 * Each attack of the hostile-client issue, against a stack with keys on (and the gateway's default
 * bounds, but a 3 s request timeout), while an honest client keeps sending small chats: the gateway's
 * RSS stays under its stated bound, the worker is never declared down, the honest client's median
 * latency stays within 5× of what it was idle, and every attacker is refused with a 4xx or a close code.
 */
describe('hostile clients e2e', () => {
  let stack: TestStack;
  let port: number;
  let gatewayPid: number;
  let idleRss = 0;
  let idleP50 = 0;
  let downs: Awaited<ReturnType<typeof watchBus<unknown>>>;
  let limited: { id: string; secret: string };
  const figures: string[] = [];

  before(async () => {
    stack = await startStack({
      services: ['router', 'translator', 'worker', 'gateway', 'metrics'],
      models: [
        { id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: 32_768, pinned: true, slots: 4 },
        { id: 'cortex-loop', file: 'fixture:cortex-loop', context_size: 4096, pinned: true, slots: 4 },
      ],
      config: {
        auth: { api_keys: [HONEST, UNLIMITED], admin_keys: [ADMIN] },
        gateway: { request_timeout_ms: REQUEST_TIMEOUT_MS, stall_timeout_ms: 30_000 },
      },
    });
    port = Number(new URL(stack.baseUrl).port);
    gatewayPid = stack.processes.get('gateway')?.pid ?? assert.fail('no gateway process');
    await waitFor(
      async () =>
        (await stack.fleet())?.workers.some((w) => w.models.filter((m) => m.state === 'ready').length === 2) ?? false,
      60_000,
    );
    const created = await fetch(`${stack.baseUrl}/admin/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'attacker', limits: { concurrent_requests: 2 } }),
    });
    assert.equal(created.status, 200);
    limited = (await created.json()) as { id: string; secret: string };
    downs = await watchBus(stack.nc, Subjects.workerDown);
    // Warm, then idle: the figures every attack is held to.
    await honestLatencies(10);
    idleP50 = median(await honestLatencies(30));
    idleRss = rss();
    figures.push(`idle: gateway RSS ${mib(idleRss)}, honest p50 ${idleP50.toFixed(1)} ms`);
  });

  after(async () => {
    await downs?.stop();
    await stack?.stop();
    if (figures.length) console.log(`hostile clients e2e figures:\n  ${figures.join('\n  ')}`);
  });

  function rss(): number {
    const status = readFileSync(`/proc/${gatewayPid}/status`, 'utf8');
    return Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? 0) * 1024;
  }

  async function honestChat(): Promise<number> {
    const started = performance.now();
    const response = await postJson(
      `${stack.baseUrl}/v1/chat/completions`,
      { model: 'cortex-chat', messages: [{ role: 'user', content: 'Hi.' }], max_tokens: 4 },
      { authorization: `Bearer ${HONEST}` },
    );
    const text = await response.text();
    assert.equal(response.status, 200, `the honest client is served: ${text}`);
    return performance.now() - started;
  }

  async function honestLatencies(count: number): Promise<number[]> {
    const out: number[] = [];
    for (let i = 0; i < count; i++) out.push(await honestChat());
    return out;
  }

  /**
   * Runs `attack` (again and again for at least `minMs`) while the honest client sends chats one after
   * another and the gateway's RSS is sampled every 50 ms; then holds them to their bounds: RSS growth
   * over the attack's start under `growthBound` (what earlier attacks left in the heap stays), honest
   * p50 within 5× of idle, no worker declared down.
   */
  async function under(
    t: TestContext,
    name: string,
    growthBound: number,
    attack: () => Promise<void>,
    minMs = 0,
  ): Promise<void> {
    const start = rss();
    let peak = start;
    const sampler = setInterval(() => (peak = Math.max(peak, rss())), 50);
    const latencies: number[] = [];
    let attacking = true;
    const honest = (async () => {
      while (attacking) latencies.push(await honestChat());
    })();
    const started = performance.now();
    try {
      do await attack();
      while (performance.now() - started < minMs);
    } finally {
      attacking = false;
      await honest;
      clearInterval(sampler);
    }
    const p50 = median(latencies);
    const line = `${name}: ${((performance.now() - started) / 1000).toFixed(1)} s, gateway RSS ${mib(start)} → peak ${mib(peak)} (+${mib(peak - start)}, bound +${mib(growthBound)}), honest p50 ${p50.toFixed(1)} ms over ${latencies.length} requests (${(p50 / idleP50).toFixed(1)}× idle)`;
    figures.push(line);
    t.diagnostic(line);
    assert.ok(peak - start <= growthBound, `gateway RSS grew ${mib(peak - start)}, over ${mib(growthBound)}`);
    assert.ok(latencies.length >= 3, `the honest client got through during the attack: ${latencies.length} requests`);
    assert.ok(p50 <= 5 * idleP50, `honest p50 ${p50.toFixed(1)} ms is within 5× of idle (${idleP50.toFixed(1)} ms)`);
    assert.equal(downs.messages.length, 0, 'no worker was declared down');
  }

  it('hostile - 10 prompts of 131,000 one-letter characters at once from a key limited to 2: each refused as too long or over the limit, the worker never stalls', async (t) => {
    await under(
      t,
      '10 × 131,000-character one-letter prompts, every 0.5 s for 3 s',
      idleRss,
      async () => {
        const burst = performance.now();
        const prompt = 'a'.repeat(131_000);
        const answers = await Promise.all(
          Array.from({ length: 10 }, () =>
            postJson(
              `${stack.baseUrl}/v1/chat/completions`,
              { model: 'cortex-chat', messages: [{ role: 'user', content: prompt }], max_tokens: 4 },
              { authorization: `Bearer ${limited.secret}` },
            ),
          ),
        );
        // The key's 2 concurrent requests are counted (in chunks, taking turns with the worker's other work) and refused; the rest wait their turn as 429s.
        for (const answer of answers) {
          const body = (await answer.json()) as { error?: { message: string } };
          assert.ok(answer.status === 400 || answer.status === 429, JSON.stringify(body));
          assert.match(body.error?.message ?? '', answer.status === 400 ? /context/ : /concurren/);
        }
        assert.ok(
          answers.some((answer) => answer.status === 400),
          'some were counted and refused as too long',
        );
        await new Promise((done) => setTimeout(done, Math.max(0, 500 - (performance.now() - burst))));
      },
      3_000,
    );
  });

  it('hostile - a 7.6 MiB body nested 4 million deep: 400 naming the field before it is parsed', async (t) => {
    // Made once: building it is the test's own work, which the honest client (in this process) would wait for.
    const depth = 4_000_000;
    const body = Buffer.from(`{"model":"cortex-chat","input":"Hi.","tools":${'['.repeat(depth)}${']'.repeat(depth)}}`);
    await under(
      t,
      'a 7.6 MiB body nested 4 million deep, every 0.5 s for 3 s',
      idleRss,
      async () => {
        const started = performance.now();
        const answer = await fetch(`${stack.baseUrl}/v1/responses`, {
          method: 'POST',
          headers: { authorization: `Bearer ${HONEST}`, 'content-type': 'application/json' },
          body,
        });
        const refusal = (await answer.json()) as { error?: { message: string; param?: string } };
        assert.equal(answer.status, 400);
        assert.match(refusal.error?.message ?? '', /field `tools` nests deeper than/);
        assert.ok(performance.now() - started < 2_000, `refused in ${(performance.now() - started).toFixed(0)} ms`);
        await new Promise((done) => setTimeout(done, Math.max(0, 500 - (performance.now() - started))));
      },
      3_000,
    );
  });

  it('hostile - 96 bodies stalled one byte short of 8 MiB from a key limited to 2 requests: past its upload caps 429 at once, the rest 408 at the request timeout', async (t) => {
    // What the gateway may hold: the bodies one key may declare at once (gateway.max_upload_bytes_per_key, 64 MiB).
    await under(t, '96 stalled 8 MiB bodies from one key', 96 * MIB, async () => {
      const sockets = await Promise.all(
        Array.from({ length: 96 }, () => rawRequest(port, limited.secret, BODY_LIMIT - 1)),
      );
      t.after(() => sockets.forEach((s) => s.socket.destroy()));
      await new Promise((done) => setTimeout(done, 300));
      const refusedAtOnce = sockets.filter((s) => s.answer().startsWith('HTTP/1.1 429'));
      assert.ok(refusedAtOnce.length >= 96 - 8, `${refusedAtOnce.length} refused before their body`);
      assert.match(refusedAtOnce[0]?.answer() ?? '', /gateway\.max_upload(s|_bytes)_per_key/);
      // The admitted ones send all but the last byte, and stall.
      const admitted = sockets.filter((s) => s.answer() === '');
      for (const s of admitted) s.socket.write(Buffer.alloc(BODY_LIMIT - 2, 0x20));
      await waitFor(() => admitted.every((s) => s.closed()), REQUEST_TIMEOUT_MS + 5_000);
      for (const s of admitted)
        assert.match(s.answer(), /^HTTP\/1\.1 408/, 'a stalled body is cut off at the request timeout');
    });
  });

  it("hostile - 96 WebSockets stalled one byte short of an 8 MiB message: past the key's sockets 429, the rest closed 1008 at the request timeout", async (t) => {
    // What the gateway may hold: one message of up to body_limit_bytes on each of the key's sockets (gateway.max_websockets_per_key, 16).
    await under(t, '96 WebSockets stalled in an 8 MiB message', 16 * BODY_LIMIT * 1.5, async () => {
      const sockets = await Promise.all(Array.from({ length: 96 }, () => rawUpgrade(port, limited.secret)));
      t.after(() => sockets.forEach((s) => s.socket.destroy()));
      await waitFor(() => sockets.every((s) => s.answer() !== ''), 5_000).catch((error: Error) => {
        throw new Error(
          `${error.message}: ${sockets.filter((s) => s.answer() === '').length} unanswered; answers: ${[...new Set(sockets.map((s) => s.answer().split('\r\n')[0]))].join(' | ')}`,
        );
      });
      const upgraded = sockets.filter((s) => s.answer().startsWith('HTTP/1.1 101'));
      const refused = sockets.filter((s) => s.answer().startsWith('HTTP/1.1 429'));
      assert.equal(upgraded.length, 16, 'gateway.max_websockets_per_key');
      assert.equal(refused.length, 80);
      assert.match(refused[0]?.answer() ?? '', /gateway\.max_websockets_per_key/);
      for (const s of upgraded) s.socket.write(maskedFrameHead(BODY_LIMIT - 16, BODY_LIMIT - 17));
      // Closed with 1008 within the request timeout and the check's interval, then cut (the attacker never answers the close).
      await waitFor(() => upgraded.every((s) => s.closed()), 2 * REQUEST_TIMEOUT_MS + 3_000);
      for (const s of upgraded) assert.equal(closeCode(s.bytes()), 1008, 'closed with 1008 at the request timeout');
    });
  });

  it('hostile - one WebSocket sending 8 MiB messages as fast as it can: paused past gateway.ws_bytes_per_second, the honest client unharmed', async (t) => {
    await under(t, 'one WebSocket flooding 8 MiB messages for 6 s', idleRss, async () => {
      const socket = new WebSocket(`ws://127.0.0.1:${port}/v1/responses`, {
        headers: { authorization: `Bearer ${HONEST}` },
        localAddress: ATTACKER_ADDRESS,
      });
      await new Promise<void>((done, fail) => {
        socket.once('open', () => done());
        socket.once('error', fail);
      });
      const message = JSON.stringify({
        type: 'response.create',
        model: 'cortex-chat',
        input: 'x'.repeat(BODY_LIMIT - 200),
      });
      const ends = performance.now() + 6_000;
      let sent = 0;
      while (performance.now() < ends && socket.readyState === WebSocket.OPEN) {
        await new Promise<void>((done) => socket.send(message, () => done()));
        sent++;
      }
      socket.terminate();
      // What the gateway reads: a burst of two messages, then one a second (8 MiB/s), and the one it
      // was parsing when it paused. What the client counts as sent also sits in the two sockets'
      // kernel buffers, which the gateway does not read: up to tcp_wmem's and tcp_rmem's maxima.
      const buffered = Math.ceil(
        (kernelBufferMax('tcp_wmem', 4 * MIB) + kernelBufferMax('tcp_rmem', 6 * MIB)) / BODY_LIMIT,
      );
      const read = 2 + 6 + 1;
      assert.ok(
        sent <= read + buffered,
        `${sent} messages of 8 MiB went through in 6 s (the gateway may read ${read}; the kernel's buffers hold ${buffered})`,
      );
    });
  });

  it('hostile - one client posting 8 MiB chats back to back for 6 s: each refused as too long, the honest client unharmed', async (t) => {
    const body = JSON.stringify({
      model: 'cortex-chat',
      messages: [{ role: 'user', content: 'x'.repeat(BODY_LIMIT - 200) }],
    });
    let refused = 0;
    await under(
      t,
      'one client posting 8 MiB chats back to back for 6 s',
      idleRss,
      async () => {
        const answer = await fetch(`${stack.baseUrl}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${UNLIMITED}`, 'content-type': 'application/json' },
          body,
        });
        assert.equal(answer.status, 400, await answer.text());
        refused++;
      },
      6_000,
    );
    figures.push(`  (${refused} chats of 8 MiB refused as too long in 6 s)`);
  });

  // Not under the honest client's bound: the turns these sockets run are honest work that takes the worker's CPU.
  it("hostile - a key's waiting WebSocket messages and its bodies share gateway.max_upload_bytes_per_key: past 64 MiB together a message is refused, and so is a body", async (t) => {
    const sockets = await Promise.all(
      Array.from({ length: 10 }, async () => {
        const socket = new WebSocket(`ws://127.0.0.1:${port}/v1/responses`, {
          headers: { authorization: `Bearer ${UNLIMITED}` },
          localAddress: ATTACKER_ADDRESS,
        });
        const errors: Array<{ status: number; error: { message: string } }> = [];
        socket.on('message', (data) => {
          const event = JSON.parse(data.toString()) as { type: string; status: number; error: { message: string } };
          if (event.type === 'error') errors.push(event);
        });
        await new Promise<void>((done, fail) => {
          socket.once('open', () => done());
          socket.once('error', fail);
        });
        return { socket, errors };
      }),
    );
    try {
      // A long turn runs on each socket; behind it waits one message of almost body_limit_bytes.
      const waiting = JSON.stringify({
        type: 'response.create',
        model: 'cortex-loop',
        input: 'x'.repeat(BODY_LIMIT - 200),
      });
      for (const { socket } of sockets) {
        socket.send(
          JSON.stringify({ type: 'response.create', model: 'cortex-loop', input: 'Go.', max_output_tokens: 3000 }),
        );
        await new Promise<void>((done) => socket.send(waiting, () => done()));
      }
      await waitFor(() => sockets.some((s) => s.errors.length > 0), 5_000);
      const body = await rawRequest(port, UNLIMITED, MIB);
      t.after(() => body.socket.destroy());
      await waitFor(() => body.answer() !== '', 5_000);
      assert.match(
        body.answer(),
        /^HTTP\/1\.1 429[\s\S]*gateway\.max_upload_bytes_per_key \(67108864\)/,
        'a body of the key is refused while its messages wait',
      );
      const refused = sockets.flatMap((s) => s.errors);
      // Eight messages of 8 MiB fit in 64 MiB; a turn that ended early lets one more in.
      assert.ok(refused.length >= 1 && refused.length <= 2, `${refused.length} messages refused`);
      figures.push(
        `10 WebSockets of one key, each queueing an 8 MiB message behind a running turn: ${refused.length} of the messages and a 1 MiB body then refused 429 (64 MiB held)`,
      );
      for (const event of refused) {
        assert.equal(event.status, 429);
        assert.match(
          event.error.message,
          /with this key would hold \d+ bytes, over gateway\.max_upload_bytes_per_key \(67108864\)/,
        );
      }
    } finally {
      for (const { socket } of sockets) socket.terminate();
    }
  });

  it('hostile - 12 background responses from a key limited to 2 concurrent: 2 run, 10 are 429', async (t) => {
    await under(t, '12 background responses from a key limited to 2', idleRss, async () => {
      const answers = await Promise.all(
        Array.from({ length: 12 }, () =>
          postJson(
            `${stack.baseUrl}/v1/responses`,
            { model: 'cortex-loop', input: 'Go.', background: true, max_output_tokens: 3000 },
            { authorization: `Bearer ${limited.secret}` },
          ),
        ),
      );
      const bodies = await Promise.all(
        answers.map(async (a) => ({
          status: a.status,
          body: (await a.json()) as { id?: string; error?: { message: string } },
        })),
      );
      const statuses = bodies.map((a) => a.status).sort();
      assert.deepEqual(
        statuses,
        [...Array(2).fill(200), ...Array(10).fill(429)],
        JSON.stringify(bodies.map((b) => b.body.error?.message ?? b.status)),
      );
      for (const { body } of bodies) {
        if (body.id)
          await fetch(`${stack.baseUrl}/v1/responses/${body.id}/cancel`, {
            method: 'POST',
            headers: { authorization: `Bearer ${limited.secret}` },
          });
      }
    });
  });

  it('hostile - 20 background responses from a key without limits: 16 run (responses.background_max_per_key), 4 are 429', async (t) => {
    await under(t, '20 background responses from a key without limits', idleRss, async () => {
      const answers = await Promise.all(
        Array.from({ length: 20 }, () =>
          postJson(
            `${stack.baseUrl}/v1/responses`,
            { model: 'cortex-loop', input: 'Go.', background: true, max_output_tokens: 3000 },
            { authorization: `Bearer ${UNLIMITED}` },
          ),
        ),
      );
      const bodies = await Promise.all(
        answers.map(async (a) => ({
          status: a.status,
          body: (await a.json()) as { id?: string; error?: { message: string } },
        })),
      );
      assert.deepEqual(bodies.map((b) => b.status).sort(), [...Array(16).fill(200), ...Array(4).fill(429)]);
      assert.match(
        bodies.find((b) => b.status === 429)?.body.error?.message ?? '',
        /responses\.background_max_per_key is 16/,
      );
      await Promise.all(
        bodies.flatMap(({ body }) =>
          body.id
            ? [
                fetch(`${stack.baseUrl}/v1/responses/${body.id}/cancel`, {
                  method: 'POST',
                  headers: { authorization: `Bearer ${UNLIMITED}` },
                }),
              ]
            : [],
        ),
      );
    });
  });

  it('hostile - 1,000 idle sockets from one address: past gateway.max_connections_per_address 429 and closed', async (t) => {
    await under(t, '1,000 idle sockets from one address', idleRss, async () => {
      const sockets = await Promise.all(Array.from({ length: 1000 }, () => rawSocket(port)));
      t.after(() => sockets.forEach((s) => s.socket.destroy()));
      await waitFor(() => sockets.filter((s) => s.closed()).length >= 1000 - 256, 5_000);
      const refused = sockets.filter((s) => s.answer().startsWith('HTTP/1.1 429'));
      assert.equal(refused.length, 1000 - 256);
    });
  });

  it('hostile - every refusal is counted by reason in cortex_gateway_refusals_total', async () => {
    await waitFor(
      async () =>
        ((await scrapeMetrics(stack.metricsUrl)).get('cortex_gateway_refusals_total{reason="too_many_connections"}') ??
          0) >= 744,
      15_000,
    );
    const metrics = await scrapeMetrics(stack.metricsUrl);
    const count = (reason: string): number => metrics.get(`cortex_gateway_refusals_total{reason="${reason}"}`) ?? 0;
    assert.ok(count('upload_bytes') + count('too_many_uploads') >= 88, 'the stalled bodies refused at once');
    assert.ok(count('request_timeout') >= 1, 'the stalled bodies cut off');
    assert.equal(count('too_many_websockets'), 80);
    assert.ok(count('ws_message_timeout') >= 16, 'the stalled WebSockets closed');
    assert.ok(count('ws_rate') >= 1, 'the flooding socket was paused');
    assert.ok(count('body_too_deep') >= 1);
  });
});

interface Raw {
  socket: Socket;
  /** What the gateway wrote, as text. */
  answer: () => string;
  bytes: () => Buffer;
  closed: () => boolean;
}

/** A socket from the attacker's address, recording what comes back. */
function rawSocket(port: number, first?: string | Buffer): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let closed = false;
    const socket = connect({ port, host: '127.0.0.1', localAddress: ATTACKER_ADDRESS }, () => {
      if (first !== undefined) socket.write(first);
      resolve({
        socket,
        answer: () => Buffer.concat(chunks).toString('latin1'),
        bytes: () => Buffer.concat(chunks),
        closed: () => closed,
      });
    });
    socket.on('data', (chunk) => chunks.push(chunk));
    socket.on('close', () => (closed = true));
    socket.on('error', () => (closed = true));
    socket.once('error', reject);
  });
}

/** A chat request whose headers declare `length` bytes of body, none of it sent yet. */
function rawRequest(port: number, key: string, length: number): Promise<Raw> {
  return rawSocket(
    port,
    `POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\ncontent-length: ${length}\r\n\r\n`,
  );
}

/** A WebSocket upgrade to the Responses socket, by hand (so a frame can be left unfinished). */
function rawUpgrade(port: number, key: string): Promise<Raw> {
  return rawSocket(
    port,
    `GET /v1/responses HTTP/1.1\r\nhost: 127.0.0.1\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\nauthorization: Bearer ${key}\r\n\r\n`,
  );
}

/** A masked text frame declaring `length` bytes of payload, with only `sent` of them. */
function maskedFrameHead(length: number, sent: number): Buffer {
  const head = Buffer.alloc(14);
  head[0] = 0x81;
  head[1] = 0x80 | 127;
  head.writeBigUInt64BE(BigInt(length), 2);
  // Mask key 0: the payload goes as it is.
  head.writeUInt32BE(0, 10);
  return Buffer.concat([head, Buffer.alloc(sent, 0x20)]);
}

/** The status code of the close frame the server sent after its 101 response; 0 without one. */
function closeCode(bytes: Buffer): number {
  const end = bytes.indexOf('\r\n\r\n');
  const frames = bytes.subarray(end + 4);
  for (let at = 0; at + 2 <= frames.length;) {
    const opcode = (frames[at] as number) & 0x0f;
    let length = (frames[at + 1] as number) & 0x7f;
    let offset = at + 2;
    if (length === 126) {
      length = frames.readUInt16BE(offset);
      offset += 2;
    } else if (length === 127) {
      length = Number(frames.readBigUInt64BE(offset));
      offset += 8;
    }
    if (opcode === 0x8) return length >= 2 ? frames.readUInt16BE(offset) : 0;
    at = offset + length;
  }
  return 0;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? 0;
}

const mib = (bytes: number): string => `${(bytes / MIB).toFixed(0)} MiB`;
