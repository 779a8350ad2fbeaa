import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import Fastify, { type FastifyInstance } from 'fastify';
import { hashSecret } from '@cortex/contracts';
import { RefusalCounter } from './refusals.js';
import { HeldBytes, installUploadSlots, type UploadCaps } from './upload-slots.js';

/** A real Fastify server with the upload caps and one JSON route, on a free loopback port. */
async function serve(
  caps: UploadCaps,
  held = new HeldBytes(),
): Promise<{ app: FastifyInstance; port: number; refusals: RefusalCounter }> {
  const app = Fastify({ bodyLimit: caps.bodyLimit, forceCloseConnections: true });
  const refusals = new RefusalCounter();
  installUploadSlots(app, caps, refusals, held);
  app.post('/v1/chat/completions', async () => ({ ok: true }));
  await app.listen({ port: 0, host: '127.0.0.1' });
  return { app, port: (app.server.address() as { port: number }).port, refusals };
}

/** A JSON body of `length` bytes. */
const body = (length: number): string => `{"a":"${'x'.repeat(length - 8)}"}`;

/** A request whose headers declare `length` bytes of body, with `sent` of them written: a body stalled short of its end. */
function stalled(port: number, key: string, length: number, sent: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => {
      socket.write(
        'POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n' +
          `authorization: Bearer ${key}\r\ncontent-type: application/json\r\n` +
          `content-length: ${length}\r\n\r\n${body(length).slice(0, sent)}`,
      );
      resolve(socket);
    });
    socket.on('error', reject);
  });
}

/** What the server answered on the socket within a moment ('' if nothing yet). */
const answerOf = (socket: Socket, ms = 300): Promise<string> =>
  new Promise((resolve) => {
    let text = '';
    socket.on('data', (chunk) => (text += chunk.toString()));
    socket.on('close', () => resolve(text));
    setTimeout(() => resolve(text), ms);
  });

const post = (port: number, key: string): Promise<Response> =>
  fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: '{"a":1}',
  });

describe('upload slots', () => {
  it(
    'upload slots - a key past its count of bodies in flight is answered 429 ' +
      'before its body is read; another key is not; a finished body frees its slot',
    async () => {
      const { app, port, refusals } = await serve({ count: 2, bytes: 0, bodyLimit: 1_000_000 });
      try {
        const held = [await stalled(port, 'k1', 1000, 10), await stalled(port, 'k1', 1000, 10)];
        await new Promise((done) => setTimeout(done, 50));
        const third = await stalled(port, 'k1', 1000, 10);
        const answer = await answerOf(third);
        assert.match(answer, /^HTTP\/1\.1 429/);
        assert.match(
          answer,
          /2 request bodies are already being sent with this key \(gateway\.max_uploads_per_key is 2\)/,
        );
        assert.equal((await post(port, 'k2')).status, 200, 'another key has its own slots');
        // The first body ends: its slot is free for the next.
        const first = held[0] as Socket;
        const answered = answerOf(first);
        first.write(body(1000).slice(10));
        assert.match(await answered, /^HTTP\/1\.1 200/);
        assert.equal((await post(port, 'k1')).status, 200);
        assert.deepEqual(refusals.snapshot(), { too_many_uploads: 1 });
        for (const socket of held) socket.destroy();
      } finally {
        await app.close();
      }
    },
  );

  it(
    'upload slots - the bytes declared count too (a chunked body as the body ' +
      'limit); the first body always goes in; a client that hangs up frees its slot',
    async () => {
      const { app, port, refusals } = await serve({ count: 0, bytes: 1500, bodyLimit: 1_000_000 });
      try {
        const big = await stalled(port, 'k1', 1_000_000, 10);
        await new Promise((done) => setTimeout(done, 50));
        const second = await stalled(port, 'k1', 1000, 10);
        assert.match(
          await answerOf(second),
          /would hold 1001000 bytes, over gateway\.max_upload_bytes_per_key \(1500\)/,
        );
        big.destroy();
        await new Promise((done) => setTimeout(done, 50));
        const small = [await stalled(port, 'k1', 700, 10), await stalled(port, 'k1', 700, 10)];
        await new Promise((done) => setTimeout(done, 50));
        const chunked = await new Promise<Socket>((resolve) => {
          const socket = connect(port, '127.0.0.1', () => {
            socket.write(
              'POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n' +
                'authorization: Bearer k1\r\ncontent-type: application/json\r\n' +
                'transfer-encoding: chunked\r\n\r\n1\r\n \r\n',
            );
            resolve(socket);
          });
        });
        assert.match(await answerOf(chunked), /^HTTP\/1\.1 429/);
        assert.deepEqual(refusals.snapshot(), { upload_bytes: 2 });
        for (const socket of small) socket.destroy();
      } finally {
        await app.close();
      }
    },
  );

  it(
    "upload slots - what the key's WebSocket messages hold counts with its " +
      'bodies: past the cap together a body is refused; another key is not',
    async () => {
      const held = new HeldBytes();
      const { app, port, refusals } = await serve({ count: 0, bytes: 1500, bodyLimit: 1_000_000 }, held);
      try {
        // What a Responses WebSocket of k1 counts while its message waits (responses.connection.ts).
        const client = `presented:${hashSecret('k1')}`;
        held.add(client, 1000);
        const body = await stalled(port, 'k1', 1000, 10);
        assert.match(
          await answerOf(body),
          /^HTTP\/1\.1 429[\s\S]*would hold 2000 bytes, over gateway\.max_upload_bytes_per_key \(1500\)/,
        );
        assert.equal((await post(port, 'k2')).status, 200, 'another key holds nothing');
        held.add(client, -1000);
        assert.equal((await post(port, 'k1')).status, 200, 'the message left the queue: the body fits');
        assert.deepEqual(refusals.snapshot(), { upload_bytes: 1 });
      } finally {
        await app.close();
      }
    },
  );

  it('held bytes - the first is always let in, then the sum must stay within the cap; 0 is no cap', () => {
    const held = new HeldBytes();
    assert.equal(held.fits('a', 5000, 1000), true, 'nothing held: in, whatever its size');
    held.add('a', 600);
    assert.equal(held.fits('a', 400, 1000), true);
    assert.equal(held.fits('a', 401, 1000), false);
    assert.equal(held.fits('b', 401, 1000), true, 'per client');
    assert.equal(held.fits('a', 10_000, 0), true);
    held.add('a', -600);
    assert.equal(held.of('a'), 0);
  });
});
