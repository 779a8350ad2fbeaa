/**
 * The two processes of the transport floor (see `transport-floor.ts`), one per argument:
 * `edge <nats-url>` answers HTTP by asking `echo` over NATS and writing its answer as a streamed chat
 * completion; `echo <nats-url>` answers on the bus at once. Neither parses, renders or looks anything
 * up: what a request costs through them is the cost of the crossings alone.
 */
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { connect, createInbox } from '@nats-io/transport-node';

const SUBJECT = 'bench.floor';
const [role, servers] = process.argv.slice(2);
if ((role !== 'edge' && role !== 'echo') || !servers) {
  console.error('usage: transport-floor-process.js edge|echo <nats-url>');
  process.exit(2);
}
const nc = await connect({ servers });

/** One content delta, then usage and `[DONE]`: what the bench's client reads as a finished stream. */
function answer(res: ServerResponse, token: string): void {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  res.write(`data: {"choices":[{"index":0,"delta":{"content":"${token}"}}]}\n\n`);
  res.end('data: {"choices":[],"usage":{"completion_tokens":1}}\n\ndata: [DONE]\n\n');
}

if (role === 'echo') {
  nc.subscribe(SUBJECT, {
    callback: (_error, msg) => {
      msg.respond('floor');
    },
  });
  await nc.flush();
  console.log(JSON.stringify({ ready: true }));
} else {
  // One inbox subscription for every request, as the gateway keeps one per stream reader.
  const inbox = createInbox();
  const waiting = new Map<string, ServerResponse>();
  nc.subscribe(`${inbox}.*`, {
    callback: (_error, msg) => {
      const id = msg.subject.slice(inbox.length + 1);
      const res = waiting.get(id);
      if (!res) return;
      waiting.delete(id);
      answer(res, msg.string());
    },
  });
  let next = 0;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      // `x-request-id: http-only` answers here: the HTTP crossings alone, as any server has them.
      if (req.headers['x-request-id'] === 'http-only') return answer(res, 'floor');
      const id = String(++next);
      waiting.set(id, res);
      nc.publish(SUBJECT, Buffer.concat(chunks), { reply: `${inbox}.${id}` });
    });
  });
  server.keepAliveTimeout = 60_000;
  await nc.flush();
  server.listen(0, '127.0.0.1', () => console.log(JSON.stringify({ port: (server.address() as AddressInfo).port })));
}
