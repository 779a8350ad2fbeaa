import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type ServerResponse } from 'node:http';
import { connect } from 'node:net';
import { once } from 'node:events';
import { CLIENT_BUFFER_LIMIT, FeedClient } from './console.hub.js';

describe('console hub', () => {
  it('console - a page that stops reading is dropped once its socket holds more than the limit, not buffered without bound', async () => {
    let response: ServerResponse | undefined;
    const server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      response = res;
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as { port: number };
    // A real socket whose reader never reads: the kernel buffers fill, then Node's.
    const socket = connect({ host: '127.0.0.1', port });
    socket.write(`GET /admin/console/feed HTTP/1.1\r\nhost: x\r\n\r\n`);
    socket.pause();
    try {
      for (let i = 0; i < 100 && !response; i++) await new Promise((done) => setTimeout(done, 10));
      assert.ok(response, 'the request arrived');
      const client = new FeedClient(response, 'e1');
      const frame = { seq: 1, event: 'live', data: JSON.stringify('x'.repeat(64 * 1024)) };
      let sent = 0;
      let held = 0;
      while (client.send(frame) && sent < 2_000) {
        sent++;
        held = Math.max(held, response.writableLength);
        // Let the socket move what the kernel takes, as the event loop would between feed events.
        await new Promise((done) => setImmediate(done));
      }
      assert.ok(sent < 2_000, 'the page was dropped');
      assert.equal(client.closed, true);
      assert.equal(client.send(frame), false, 'nothing more is written to a dropped page');
      assert.ok(
        held > 0 && held <= CLIENT_BUFFER_LIMIT + 70 * 1024,
        `held at most one frame over the limit, held ${held}`,
      );
    } finally {
      socket.destroy();
      server.close();
    }
  });
});
