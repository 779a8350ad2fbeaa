import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { once } from 'node:events';
import { SseWriter } from './sse.writer.js';

/** Far more than loopback socket buffers hold, so the write is left waiting in the process. */
const BIG = 'x'.repeat(64 * 2 ** 20);

/** A real HTTP server whose handler writes one huge frame through an SseWriter, and a client that reads nothing until told. */
async function stalledStream(
  stallTimeoutMs: number,
): Promise<{ writer: Promise<SseWriter>; response: IncomingMessage; close: () => void }> {
  let handed!: (writer: SseWriter) => void;
  const writer = new Promise<SseWriter>((resolve) => (handed = resolve));
  const server = createServer((_req, res: ServerResponse) => {
    const sse = new SseWriter({ hijack: () => undefined, raw: res } as never, 'req-1', stallTimeoutMs);
    sse.data({ text: BIG });
    handed(sse);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const req = request({ port: (server.address() as AddressInfo).port, method: 'POST' });
  req.end();
  const [response] = (await once(req, 'response')) as [IncomingMessage];
  response.pause();
  return { writer, response, close: () => server.close() };
}

describe('sse writer', () => {
  it('sse writer - a client that reads nothing is cut off after the stall timeout', async () => {
    const { writer, response, close } = await stalledStream(300);
    const sse = await writer;
    const started = Date.now();
    await assert.rejects(sse.drained(), /read nothing of the stream for 300 ms/);
    assert.ok(Date.now() - started >= 250, 'waited for the stall timeout');
    assert.ok(sse.closed, 'the socket is destroyed');
    response.destroy();
    close();
  });

  it('sse writer - a slow client makes the writer wait, then it goes on once the client reads', async () => {
    const { writer, response, close } = await stalledStream(60_000);
    const sse = await writer;
    let done = false;
    const drained = sse.drained().then(() => (done = true));
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(done, false, 'waits while the client reads nothing');
    response.resume();
    await drained;
    assert.equal(sse.closed, false);
    response.destroy();
    close();
  });

  it('sse writer - frames written in one turn leave in one socket write, with the headers', async () => {
    const server = createServer((_req, res: ServerResponse) => {
      const sse = new SseWriter({ hijack: () => undefined, raw: res } as never, 'req-2', 60_000);
      let writes = 0;
      const socket = res.socket as unknown as {
        _writev: (...args: unknown[]) => void;
        _write: (...args: unknown[]) => void;
      };
      for (const method of ['_writev', '_write'] as const) {
        const original = socket[method].bind(socket);
        socket[method] = (...args: unknown[]) => {
          writes++;
          original(...args);
        };
      }
      sse.data({ n: 1 });
      sse.data({ n: 2 });
      sse.comment('three');
      setImmediate(() => {
        server.emit('writes', writes);
        sse.end();
      });
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const counted = once(server, 'writes');
    const req = request({ port: (server.address() as AddressInfo).port, method: 'POST' });
    req.end();
    const [response] = (await once(req, 'response')) as [IncomingMessage];
    let body = '';
    for await (const chunk of response) body += String(chunk);
    const [writes] = (await counted) as [number];
    assert.equal(writes, 1, 'headers and three frames in one write');
    assert.equal(body, 'data: {"n":1}\n\ndata: {"n":2}\n\n: three\n\n');
    server.close();
  });

  it('sse writer - frames and the end written in one turn reach the client whole and in order', async () => {
    const server = createServer((_req, res: ServerResponse) => {
      const sse = new SseWriter({ hijack: () => undefined, raw: res } as never, 'req-3', 60_000);
      sse.data({ n: 1 });
      sse.comment('two');
      sse.done();
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const req = request({ port: (server.address() as AddressInfo).port, method: 'POST' });
    req.end();
    const [response] = (await once(req, 'response')) as [IncomingMessage];
    let body = '';
    for await (const chunk of response) body += String(chunk);
    assert.equal(body, 'data: {"n":1}\n\n: two\n\ndata: [DONE]\n\n');
    server.close();
  });
});
