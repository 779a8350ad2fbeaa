import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** What the server answers every request with: a JSON body with a status, or SSE text. */
export type CannedReply = { status: number; json: unknown } | { sse: string };

/**
 * For codec specs that let an official SDK judge the wire format: serves `reply` on 127.0.0.1, records
 * each request body, and runs `run` with a client made for the server's base URL.
 */
export async function withReplyServer<C>(
  reply: CannedReply,
  client: (baseUrl: string) => C,
  run: (client: C, bodies: unknown[]) => Promise<void>,
): Promise<void> {
  const bodies: unknown[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      bodies.push(JSON.parse(Buffer.concat(chunks).toString('utf8')));
      if ('json' in reply) {
        res.writeHead(reply.status, { 'content-type': 'application/json' }).end(JSON.stringify(reply.json));
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' }).end(reply.sse);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  try {
    await run(client(`http://127.0.0.1:${port}`), bodies);
  } finally {
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
