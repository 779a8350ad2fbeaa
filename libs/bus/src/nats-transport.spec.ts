import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import { connectBus } from './connect.js';
import { natsReachable } from './nats-server.js';

/**
 * A server that accepts TCP and never says a word: what a client sees of a nats-server stopped with
 * SIGSTOP (the kernel still completes the handshake) or of a stalled proxy.
 */
describe('nats transport', () => {
  let server: Server;
  let url: string;
  const sockets: Socket[] = [];
  const open = (): number => sockets.filter((s) => !s.destroyed && !s.readableEnded).length;

  before(async () => {
    server = createServer((socket) => {
      sockets.push(socket);
      socket.on('end', () => socket.end());
      socket.on('error', () => undefined);
    });
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
    const address = server.address() as { port: number };
    url = `nats://127.0.0.1:${address.port}`;
  });

  after(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((done) => server.close(done));
  });

  const closedByClient = (socket: Socket): Promise<void> =>
    socket.readableEnded || socket.destroyed
      ? Promise.resolve()
      : new Promise((done) => {
          socket.once('end', done);
          socket.once('close', done);
        });

  it(
    'nats transport - a connect that times out on a silent server fails and closes its socket',
    { timeout: 10_000 },
    async () => {
      const before = sockets.length;
      await assert.rejects(connectBus({ url, name: 'cortex-spec', timeoutMs: 300 }), /cannot reach NATS at .*timeout/i);
      assert.equal(sockets.length, before + 1, 'one attempt, one socket');
      // Bounded: the test runner's own timeout ends the test if the socket stays open.
      await closedByClient(sockets.at(-1)!);
      assert.equal(open(), 0);
    },
  );

  it('nats transport - the reachability probe closes its socket too', { timeout: 10_000 }, async () => {
    const before = sockets.length;
    assert.equal(await natsReachable(url, 300), false);
    assert.equal(sockets.length, before + 1);
    await closedByClient(sockets.at(-1)!);
    assert.equal(open(), 0);
  });
});
