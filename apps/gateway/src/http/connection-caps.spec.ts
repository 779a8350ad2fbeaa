import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { connect, type Socket } from 'node:net';
import { installConnectionCaps, type ConnectionCaps } from './connection-caps.js';

/** A real HTTP server with the caps, on a free loopback port. */
async function serve(caps: ConnectionCaps): Promise<{ server: Server; port: number; refused: string[] }> {
  const refused: string[] = [];
  const server = createServer((_request, response) => response.end('ok'));
  installConnectionCaps(server, caps, (address) => refused.push(address));
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  return { server, port: (server.address() as { port: number }).port, refused };
}

/** Opens a socket and waits until it is connected. */
const open = (port: number): Promise<Socket> =>
  new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => resolve(socket));
    socket.on('error', reject);
  });

/** What the server wrote on the socket before it closed it (or '' if it is still open after a moment). */
const answerOf = (socket: Socket): Promise<string> =>
  new Promise((resolve) => {
    let text = '';
    socket.on('data', (chunk) => (text += chunk.toString()));
    socket.on('close', () => resolve(text));
    setTimeout(() => resolve(text), 300);
  });

describe('connection caps', () => {
  it('connection caps - past its cap an address is answered 429 and closed; a closed connection frees its place', async () => {
    const { server, port, refused } = await serve({ total: 0, perAddress: 3, exempt: [] });
    try {
      const held = await Promise.all([open(port), open(port), open(port)]);
      const fourth = await open(port);
      const answer = await answerOf(fourth);
      assert.match(answer, /^HTTP\/1\.1 429 Too Many Requests\r\n/);
      assert.match(
        answer,
        /too many connections from 127\.0\.0\.1: at most 3 at once \(gateway\.max_connections_per_address\)/,
      );
      assert.deepEqual(refused, ['127.0.0.1']);
      held[0]?.destroy();
      await new Promise((done) => setTimeout(done, 50));
      const again = await open(port);
      again.write('GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n');
      assert.match(await answerOf(again), /^HTTP\/1\.1 200 OK/);
      for (const socket of held) socket.destroy();
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  it('connection caps - trusted proxies are not capped per address', async () => {
    const { server, port, refused } = await serve({ total: 0, perAddress: 1, exempt: ['127.0.0.0/8'] });
    try {
      const sockets = await Promise.all([open(port), open(port), open(port)]);
      sockets[2]?.write('GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n');
      assert.match(await answerOf(sockets[2] as Socket), /^HTTP\/1\.1 200 OK/);
      assert.deepEqual(refused, []);
      for (const socket of sockets) socket.destroy();
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });
});
