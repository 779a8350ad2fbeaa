import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Agent as HttpAgent, createServer, type Server, type ServerResponse } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import type { AddressInfo } from 'node:net';
import { ADDRESS_REFUSED, asCall, mcpFetch } from './mcp-fetch.js';
import { CUT_META } from './tool-result.js';

const FIFTY_MB = 50 * 1024 * 1024;
const LIMIT = 64 * 1024;

/** Writes `total` bytes of one answer as fast as the client takes them; `sent` counts what left before the client hung up. */
function stream(
  res: ServerResponse,
  head: string,
  total: number,
  tail: string,
  sent: { bytes: number; closed: boolean },
): void {
  const block = Buffer.alloc(64 * 1024, 'q');
  res.write(head);
  let left = total;
  const pump = (): void => {
    while (left > 0) {
      const piece = block.subarray(0, Math.min(block.length, left));
      left -= piece.length;
      sent.bytes += piece.length;
      if (!res.write(piece)) return void res.once('drain', pump);
    }
    res.end(tail);
  };
  res.on('close', () => (sent.closed = left > 0));
  pump();
}

describe('mcp fetch', () => {
  let server: Server;
  let base: string;
  const sent = { bytes: 0, closed: false };
  const agents = { http: new HttpAgent({ keepAlive: true }), https: new HttpsAgent({ keepAlive: true }) };
  const fetch = mcpFetch({ addresses: null, messageLimit: LIMIT, agents });
  const call = JSON.stringify({ jsonrpc: '2.0', id: 41, method: 'tools/call', params: { name: 'dump' } });

  before(async () => {
    // A plain byte source, not an MCP server: what is measured is how much of an answer the fetch reads.
    server = createServer((req, res) => {
      req.resume();
      sent.bytes = 0;
      sent.closed = false;
      if (req.url === '/json') {
        res.writeHead(200, { 'content-type': 'application/json' });
        stream(res, '{"result":{"content":[{"type":"text","text":"', FIFTY_MB, '"}]},"jsonrpc":"2.0","id":41}', sent);
      } else if (req.url === '/sse') {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        stream(
          res,
          'event: message\ndata: {"result":{"content":[{"type":"text","text":"',
          FIFTY_MB,
          '"}]},"jsonrpc":"2.0","id":41}\n\n',
          sent,
        );
      } else if (req.url === '/hang') {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(': waiting\n\n');
      } else {
        res.writeHead(404, { 'content-type': 'text/html' });
        res.end('x'.repeat(1_000_000));
      }
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  after(async () => {
    agents.http.destroy();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it('mcp fetch - a 50 MB JSON or SSE answer is cut at the limit: a stand-in for the POST, the rest left unread', async () => {
    for (const path of ['/json', '/sse']) {
      const response = await fetch(`${base}${path}`, {
        method: 'POST',
        body: call,
        headers: { 'content-type': 'application/json' },
      });
      const body = await response.text();
      assert.ok(body.length < LIMIT + 1_000, `${path}: ${body.length} bytes`);
      const data = path === '/sse' ? body.replace(/^event: message\ndata: /, '').trimEnd() : body;
      const message = JSON.parse(data) as { id: number; result: { content: Array<{ text: string }>; _meta: object } };
      assert.equal(message.id, 41);
      assert.match(message.result.content[0]!.text, /^q{60000,}$/);
      assert.deepEqual(message.result._meta, { [CUT_META]: { limit: LIMIT } });
      await new Promise((resolve) => setTimeout(resolve, 50));
      assert.equal(sent.closed, true, `${path}: the connection was closed before the answer's end`);
      assert.ok(sent.bytes < FIFTY_MB / 2, `${path}: the server got rid of ${sent.bytes} bytes`);
    }
  });

  it("mcp fetch - another body is kept to its first bytes; a call's signal aborts its own request, not a notification", async () => {
    const page = await fetch(`${base}/missing`, { method: 'GET' });
    assert.equal(page.status, 404);
    assert.equal((await page.text()).length, 16 * 1024);
    const controller = new AbortController();
    const pending = asCall(controller.signal, () => fetch(`${base}/hang`, { method: 'POST', body: call }));
    const response = await pending;
    const reading = response.text();
    controller.abort(new Error('the call timed out'));
    await assert.rejects(reading, /the call timed out|aborted/);
    const notice = JSON.stringify({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 41 } });
    const gone = new AbortController();
    gone.abort();
    const sentAnyway = await asCall(gone.signal, () => fetch(`${base}/missing`, { method: 'POST', body: notice }));
    assert.equal(sentAnyway.status, 404, "a notification is not the call's own request");
    await sentAnyway.body?.cancel();
  });

  it('mcp fetch - a request URL naming a non-public address is refused before anything is sent', async () => {
    const checked = mcpFetch({ addresses: { allowPrivate: false }, messageLimit: LIMIT, agents });
    await assert.rejects(checked(`${base}/json`, { method: 'POST', body: call }), (error: NodeJS.ErrnoException) => {
      assert.equal(error.code, ADDRESS_REFUSED);
      assert.match(error.message, /127\.0\.0\.1 is a non-public address/);
      return true;
    });
    await assert.rejects(
      checked(`${base.replace('127.0.0.1', 'localhost')}/json`, { method: 'POST', body: call }),
      (error: NodeJS.ErrnoException) => error.code === ADDRESS_REFUSED,
    );
  });
});
