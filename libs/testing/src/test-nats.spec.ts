import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type AddressInfo } from 'node:net';
import { afterEach, describe, it } from 'node:test';
import { startTestNats } from './test-nats.js';

describe('startTestNats', () => {
  const saved = { DOCKER_HOST: process.env.DOCKER_HOST, CORTEX_TEST_NATS: process.env.CORTEX_TEST_NATS };

  afterEach(() => {
    for (const [key, value] of Object.entries(saved)) {
      if (value === undefined) delete process.env[key];
      else process.env[key] = value;
    }
  });

  it('starts the local nats-server even when a Docker engine is configured, without asking the engine', async () => {
    // A stand-in engine address that only counts connections: testcontainers would connect to it first.
    let engineConnections = 0;
    const engine = createServer((socket) => {
      engineConnections += 1;
      socket.destroy();
    }).listen(0, '127.0.0.1');
    await once(engine, 'listening');
    process.env.DOCKER_HOST = `tcp://127.0.0.1:${(engine.address() as AddressInfo).port}`;
    delete process.env.CORTEX_TEST_NATS;
    try {
      const nats = await startTestNats();
      await nats.stop();
      assert.equal(nats.kind, 'local');
      assert.match(nats.url, /^nats:\/\/127\.0\.0\.1:\d+$/);
      assert.equal(engineConnections, 0);
    } finally {
      engine.close();
    }
  });

  it('refuses a container together with a config file, naming the variable to unset', async () => {
    process.env.CORTEX_TEST_NATS = 'testcontainers';
    await assert.rejects(
      startTestNats({ configFile: '/dev/null' }),
      /CORTEX_TEST_NATS=testcontainers cannot start a server with a config file/,
    );
  });
});
