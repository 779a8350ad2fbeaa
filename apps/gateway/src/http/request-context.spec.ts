import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import Fastify from 'fastify';
import { contextOf, installRequestContext, RequestContext } from './request-context.js';

/** A real Fastify request, asked for its id twice (as the access hook and the error filter each do). */
async function idsOf(headers: Record<string, string>): Promise<{ first: string; second: string; echoed: string }> {
  const app = Fastify();
  installRequestContext(app);
  app.get('/', (request, reply) => {
    const first = contextOf(request).id;
    void reply.header('x-request-id', first).send({ first, second: contextOf(request).id });
  });
  try {
    const response = await app.inject({ method: 'GET', url: '/', headers });
    return {
      ...(response.json() as { first: string; second: string }),
      echoed: String(response.headers['x-request-id']),
    };
  } finally {
    await app.close();
  }
}

describe('request context', () => {
  it('request id - a request without one gets a fresh id, the same on every call', async () => {
    const { first, second, echoed } = await idsOf({});
    assert.match(first, /^req_[0-9a-f]{24}$/);
    assert.equal(second, first);
    assert.equal(echoed, first);
  });

  it('request id - a sane caller id is kept; an unsafe one is replaced once', async () => {
    assert.equal((await idsOf({ 'x-request-id': 'abc-123' })).second, 'abc-123');
    const unsafe = await idsOf({ 'x-request-id': 'has space' });
    assert.notEqual(unsafe.first, 'has space');
    assert.equal(unsafe.second, unsafe.first);
  });

  it("request context - a WebSocket turn has an id, arrival and meter of its own, and its connection's key, headers and tier", () => {
    const connection = RequestContext.of({ 'x-request-id': 'conn-1' });
    connection.prioritize({ tier: 7, account: 'team-a' });
    const turn = connection.turn(2);
    assert.equal(turn.id, 'conn-1.2');
    assert.equal(turn.headers, connection.headers);
    assert.deepEqual(turn.priority, { tier: 7, account: 'team-a' });
    assert.notEqual(turn.meter, connection.meter);
    assert.ok(turn.arrival >= connection.arrival);
    turn.prioritize({ tier: 2 });
    assert.deepEqual(connection.priority, { tier: 7, account: 'team-a' }, "a turn's own tier is not its connection's");
  });
});
