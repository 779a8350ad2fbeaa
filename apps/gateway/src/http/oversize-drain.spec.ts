import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { request as httpRequest } from 'node:http';
import Fastify, { type FastifyInstance } from 'fastify';
import { drainBudget, installOversizeDrain, type DrainBudget } from './oversize-drain.js';

const MiB = 1024 * 1024;

/** A real Fastify server with a 1 KiB body limit and the drain installed; the raw sockets it served. */
async function server(budget: DrainBudget): Promise<{ app: FastifyInstance; url: string }> {
  const app = Fastify({ bodyLimit: 1024 });
  installOversizeDrain(app, budget);
  app.post('/', async () => ({ ok: true }));
  await app.listen({ port: 0, host: '127.0.0.1' });
  const address = app.server.address();
  assert.ok(address && typeof address === 'object');
  return { app, url: `http://127.0.0.1:${address.port}/` };
}

describe('oversize drain', () => {
  it('oversize drain - the budget is 16 times the body limit, never under 128 MiB', () => {
    const cases: Array<[number, number]> = [
      [1024, 128 * MiB],
      [8 * MiB, 128 * MiB],
      [32 * MiB, 512 * MiB],
    ];
    for (const [limit, bytes] of cases) assert.equal(drainBudget(limit).bytes, bytes, `limit ${limit}`);
  });

  it('oversize drain - fetch, which writes the whole body first, reads the 413 every time', async () => {
    const { app, url } = await server(drainBudget(1024));
    try {
      const body = 'x'.repeat(16 * MiB);
      const statuses: Array<number | string> = [];
      for (let i = 0; i < 5; i++) {
        const response = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body,
        }).catch((error: Error) => error);
        statuses.push(response instanceof Error ? response.message : response.status);
        if (!(response instanceof Error)) await response.text();
      }
      assert.deepEqual(statuses, [413, 413, 413, 413, 413]);
    } finally {
      await app.close();
    }
  });

  it('oversize drain - past its budget the upload is cut off, not read to the end', async () => {
    const { app, url } = await server({ bytes: 256 * 1024, ms: 10_000 });
    try {
      const req = httpRequest(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': 64 * MiB },
      });
      const statuses: number[] = [];
      req.on('response', (res) => {
        statuses.push(res.statusCode ?? 0);
        res.resume();
      });
      req.on('error', () => undefined);
      const closed = once(req, 'close');
      const chunk = Buffer.alloc(64 * 1024, 'x');
      let sent = 0;
      // Writes until the server hangs up; a server that read everything would take all 64 MiB.
      while (sent < 64 * MiB && !req.destroyed) {
        if (!req.write(chunk)) await Promise.race([once(req, 'drain'), closed]);
        sent += chunk.length;
      }
      await closed;
      assert.deepEqual(statuses, [413]);
      assert.ok(sent < 64 * MiB, `the server cut the upload off (${sent} bytes sent)`);
    } finally {
      await app.close();
    }
  });
});
