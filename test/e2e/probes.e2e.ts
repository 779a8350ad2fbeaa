import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { freePort } from '@cortex/bus';
import { livenessWindowMs } from '@cortex/contracts';
import { FIXTURE_CATALOGUE, runCli, scrapeMetrics, startStack, waitFor, type TestStack } from '@cortex/testing';

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

  type Health = {
    status: string;
    reasons: string[];
    unservable: string[];
    workers: { up: number; down: number; draining: number };
  };
  const health = async (): Promise<{ status: number; body: Health }> => {
    const response = await fetch(`${stack.baseUrl}/health`, { signal: AbortSignal.timeout(5_000) });
    return { status: response.status, body: (await response.json()) as Health };
  };

  it("probes - the gateway's GET /health and `cortex health` say ok in one word while the fleet is whole", async () => {
    const answer = await health();
    assert.equal(answer.status, 200);
    assert.deepEqual(answer.body, {
      status: 'ok',
      reasons: [],
      unservable: [],
      workers: { up: 1, down: 0, draining: 0 },
    });
    const cli = runCli(stack, 'health');
    assert.equal(cli.status, 0, cli.stderr);
    assert.equal(cli.stdout, 'ok: every catalogue model can be served; 1 worker up\n');
    const json = runCli(stack, 'health', '--json');
    assert.deepEqual(JSON.parse(json.stdout), answer.body);
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
    // The gateway's own connection notices the loss as the other services' do, within moments.
    await waitFor(async () => (await health()).status === 503, 10_000);
    const down = await health();
    assert.equal(down.status, 503);
    assert.equal(down.body.status, 'degraded');
    assert.match(down.body.reasons[0] ?? '', /^NATS is unreachable/);
    await stack.nats.restart();
    for (const service of PROBED) await waitFor(async () => (await probe(service, '/readyz')).status === 200, 20_000);
    await waitFor(async () => (await health()).body.status === 'ok', 20_000);
  });

  it('probes - with its only worker killed the fleet is degraded: 503 naming the model nothing can serve, and `cortex health` exits 4', async () => {
    stack.processes.get('worker')?.kill('SIGKILL');
    // One verdict answers for a second: wait for the one that names the model (the router first sees the worker go).
    await waitFor(async () => (await health()).body.unservable.length > 0, 20_000);
    const answer = await health();
    assert.equal(answer.status, 503);
    assert.deepEqual(answer.body.unservable, [FIXTURE_CATALOGUE[0]!.id]);
    assert.match(
      answer.body.reasons.join(' | '),
      /no worker takes new models .*1 catalogue model cannot be served: cortex-chat .*worker \S+ is down: it stopped heartbeating without saying goodbye \(last seen \d+ s ago; forgotten in \d+ s unless it heartbeats again\)/,
    );
    const cli = runCli(stack, 'health');
    assert.equal(cli.status, 4, cli.stdout + cli.stderr);
    assert.match(cli.stdout, /^degraded: 0 workers up, 1 down\n {2}- no worker takes new models/);
    // The metrics service says the same, for the alert rules (asked every 5 s: it may first have
    // read the fleet before the router named the model, as /health may, see above).
    let metrics = new Map<string, number>();
    await waitFor(async () => {
      metrics = await scrapeMetrics(stack.metricsUrl);
      return (
        metrics.get('cortex_fleet_health{status="degraded"}') === 1 &&
        metrics.get('cortex_fleet_unservable_models') === 1
      );
    }, 20_000);
    assert.equal(metrics.get('cortex_fleet_health{status="ok"}'), 0);
  });

  it('probes - ok again when the worker returns; a second worker killed while the first serves every model: impaired (200) within a heartbeat window, ok once it is back', async () => {
    // A dead worker is seen after its liveness window (three 250 ms heartbeats, at least 2 s); one
    // verdict answers for a second, and a heartbeat may be on its way.
    const window = livenessWindowMs(250) + 1_000 + 1_000;
    const probeEnv = async (): Promise<Record<string, string>> => ({
      CORTEX_PROBE_LISTEN: `127.0.0.1:${await freePort()}`,
    });
    // The worker killed above comes back under its own id.
    stack.spawnService('worker', await probeEnv());
    await waitFor(async () => (await health()).body.status === 'ok', 60_000);
    const second = stack.spawnService('worker', { CORTEX_WORKER_ID: 'w2', ...(await probeEnv()) });
    await waitFor(async () => {
      const body = (await health()).body;
      return body.status === 'ok' && body.workers.up === 2;
    }, 60_000);
    second.kill('SIGKILL');
    const killed = performance.now();
    await waitFor(async () => (await health()).body.status === 'impaired', 15_000, 100);
    const took = performance.now() - killed;
    const impaired = await health();
    assert.equal(impaired.status, 200, 'impaired still serves: a balancer keeps sending');
    assert.deepEqual(impaired.body.unservable, []);
    assert.match(impaired.body.reasons.join(' | '), /worker w2 is down/);
    assert.ok(
      took < window,
      `impaired ${Math.round(took)} ms after the kill (a heartbeat window and a shared verdict: ${window} ms)`,
    );
    const cli = runCli(stack, 'health');
    assert.equal(cli.status, 3, cli.stdout + cli.stderr);
    stack.spawnService('worker', { CORTEX_WORKER_ID: 'w2', ...(await probeEnv()) });
    await waitFor(async () => {
      const body = (await health()).body;
      return body.status === 'ok' && body.workers.up === 2;
    }, 60_000);
    assert.equal(runCli(stack, 'health').status, 0);
  });
});
