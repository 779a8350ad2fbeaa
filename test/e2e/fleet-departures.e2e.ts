import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import type { ChildProcess } from 'node:child_process';
import { livenessWindowMs, Subjects, type FleetHealth, type WorkerLifecycleEvent } from '@cortex/contracts';
import { runCli, startStack, waitFor, watchBus, type TestStack } from '@cortex/testing';

const HEARTBEAT_MS = 250;
/** Small, so a silent worker is forgotten within the test; the default is 10 minutes. */
const FORGET_MS = 10_000;
/** A gateway answers /health from a reading at most a second old. */
const HEALTH_CACHE_MS = 1_000;

/**
 * Workers that leave: one stopped gracefully says goodbye and is gone from the fleet at once; one
 * killed is down (the fleet impaired) until the forget window (`router.forget_worker_after_ms`) is over.
 */
describe('fleet e2e - workers that leave', () => {
  let stack: TestStack;

  before(async () => {
    stack = await startStack({
      config: {
        worker: { id: 'w1', heartbeat_ms: HEARTBEAT_MS },
        router: { forget_worker_after_ms: FORGET_MS },
        drain_timeout_ms: 2_000,
      },
    });
  });

  after(async () => {
    await stack?.stop();
  });

  const health = async (): Promise<FleetHealth> => (await (await fetch(`${stack.baseUrl}/health`)).json()) as never;
  const workerIds = async (): Promise<string[]> => (await stack.fleet())?.workers.map((w) => w.workerId).sort() ?? [];
  const spawnWorker = async (id: string): Promise<ChildProcess> => {
    const child = stack.spawnService('worker', { CORTEX_WORKER_ID: id });
    await waitFor(async () => (await stack.fleet())?.workers.some((w) => w.workerId === id && w.up) === true, 30_000);
    return child;
  };
  const stop = async (child: ChildProcess, signal: NodeJS.Signals): Promise<void> => {
    const exited = once(child, 'exit');
    child.kill(signal);
    await exited;
  };

  it('fleet - a worker stopped with SIGTERM says goodbye: gone from the fleet at once, /health ok with its replacement', async () => {
    const w2 = await spawnWorker('w2');
    await waitFor(async () => (await health()).status === 'ok', 10_000);
    const down = await watchBus<WorkerLifecycleEvent>(stack.nc, Subjects.workerDown);
    await stop(w2, 'SIGTERM');
    // Its goodbye was the last thing it sent before it exited: no router still lists it.
    await waitFor(async () => !(await workerIds()).includes('w2'), HEARTBEAT_MS * 4);
    const w3 = stack.spawnService('worker', { CORTEX_WORKER_ID: 'w3' });
    await waitFor(async () => (await workerIds()).includes('w3'), 30_000);
    // Within a heartbeat window of its leaving the verdict is ok again: nothing waited for w2 to go silent.
    await waitFor(async () => (await health()).status === 'ok', livenessWindowMs(HEARTBEAT_MS) + HEALTH_CACHE_MS);
    const verdict = await health();
    assert.deepEqual(verdict.reasons, []);
    assert.deepEqual(verdict.workers, { up: 2, down: 0, draining: 0 });
    assert.deepEqual(await workerIds(), ['w1', 'w3']);
    await down.stop();
    assert.deepEqual(
      down.messages.map((e) => [e.workerId, e.reason]),
      [['w2', 'left']],
      'announced once, as left',
    );
    assert.doesNotMatch(runCli(stack, 'status').stdout, /\bw2\b/);
    await stop(w3, 'SIGTERM');
    await waitFor(async () => !(await workerIds()).includes('w3'), 5_000);
  });

  it('fleet - a worker killed with SIGKILL is down (impaired) for the forget window, then forgotten (ok, gone from cortex status)', async () => {
    const w4 = await spawnWorker('w4');
    await stop(w4, 'SIGKILL');
    await waitFor(async () => (await health()).status === 'impaired', 10_000);
    const impaired = await health();
    assert.match(
      impaired.reasons.join('\n'),
      /worker w4 is down: it stopped heartbeating without saying goodbye \(last seen \d+ s ago; forgotten in \d+ s unless it heartbeats again\)/,
    );
    assert.equal(impaired.workers.down, 1);
    const status = runCli(stack, 'status');
    assert.match(status.stdout, /w4\s+down \(\d+s; forgotten in \d+s\)/, status.stdout + status.stderr);
    const metrics = async (): Promise<string> => (await fetch(`${stack.metricsUrl}/metrics`)).text();

    // Bounded by the window and a sweep: forgotten, the fleet that remains is whole.
    await waitFor(async () => (await health()).status === 'ok', FORGET_MS + 5_000);
    assert.deepEqual((await health()).reasons, []);
    assert.deepEqual(await workerIds(), ['w1']);
    const after = runCli(stack, 'status');
    assert.equal(after.status, 0, after.stderr);
    assert.doesNotMatch(after.stdout, /\bw4\b/);
    // The metrics service forgets it on the same window: no `cortex_worker_up` series is left behind.
    await waitFor(async () => !(await metrics()).includes('worker="w4"'), 5_000);
  });
});
