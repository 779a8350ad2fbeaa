import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { freePort } from '@cortex/bus';
import { FIXTURE_CATALOGUE, startStack, waitFor, type TestStack } from '@cortex/testing';

// router, translator and worker serve no HTTP; with probe_listen (CORTEX_PROBE_LISTEN) each answers
// Kubernetes probes: /healthz while it runs, /readyz 200 while it is connected to the bus.

const PROBED = ['router', 'translator', 'worker'] as const;

describe('probes e2e', () => {
  let stack: TestStack;
  const urls = new Map<string, string>();

  before(async () => {
    for (const service of PROBED) urls.set(service, `http://127.0.0.1:${await freePort()}`);
    const serviceEnv = Object.fromEntries(
      PROBED.map((service) => [service, { CORTEX_PROBE_LISTEN: urls.get(service)!.replace('http://', '') }]),
    );
    stack = await startStack({ models: [FIXTURE_CATALOGUE[0]!], serviceEnv });
  });

  after(async () => {
    await stack?.stop();
  });

  const probe = async (
    service: string,
    path: string,
  ): Promise<{ status: number; body: { status?: string; detail?: string } }> => {
    const response = await fetch(`${urls.get(service)}${path}`, { signal: AbortSignal.timeout(3_000) });
    return { status: response.status, body: (await response.json()) as { status?: string; detail?: string } };
  };

  it('probes - router, translator and worker answer /healthz and /readyz, and nothing else', async () => {
    for (const service of PROBED) {
      assert.deepEqual((await probe(service, '/healthz')).body, { status: 'ok' }, `${service} /healthz`);
      const ready = await probe(service, '/readyz');
      assert.equal(ready.status, 200, `${service} /readyz`);
      assert.equal(ready.body.status, 'ok');
      assert.equal((await probe(service, '/v1/models')).status, 404);
    }
    assert.match(
      (await probe('worker', '/readyz')).body.detail ?? '',
      /cortex-chat/,
      "the worker's readiness names its models",
    );
  });

  it('probes - while NATS is down /readyz is 503 naming the bus and /healthz stays 200; both recover', async (t) => {
    if (!stack.nats.kill || !stack.nats.restart)
      return t.skip('NATS runs in a container here; killing it needs a local nats-server');
    await stack.nats.kill();
    await waitFor(async () => (await probe('router', '/readyz')).status === 503, 10_000);
    for (const service of PROBED) {
      await waitFor(async () => (await probe(service, '/readyz')).status === 503, 10_000);
      assert.match((await probe(service, '/readyz')).body.detail ?? '', /bus disconnected/);
      assert.equal((await probe(service, '/healthz')).status, 200, `${service} is alive without the bus`);
    }
    await stack.nats.restart();
    for (const service of PROBED) await waitFor(async () => (await probe(service, '/readyz')).status === 200, 20_000);
  });
});
