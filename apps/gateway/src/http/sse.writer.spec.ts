import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { once } from 'node:events';
import { SseWriter } from './sse.writer.js';

/** Far more than loopback socket buffers hold, so the write is left waiting in the process. */
const BIG = 'x'.repeat(64 * 2 ** 20);

/** A real HTTP server whose handler writes one huge frame through an SseWriter, and a client that reads nothing until told. */
async function stalledStream(stallTimeoutMs: number): Promise<{ writer: Promise<SseWriter>; response: IncomingMessage; close: () => void }> {
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
});
