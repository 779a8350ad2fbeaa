import { after, before, describe, it } from 'node:test';
import type { ChildProcess } from 'node:child_process';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { once } from 'node:events';
import { Kvm } from '@nats-io/kv';
import { BusClient } from '@cortex/bus';
import { everyWorker, Subjects, WORKER_ID_TOKEN, type LoadResult } from '@cortex/contracts';
import { fixtureEntry as fixture, startStack, waitFor, watchBus, type TestStack } from '@cortex/testing';

const user = [{ role: 'user' as const, content: 'Hi.' }];
/**
 * Far above the 5 s the fixes aim for (this host is shared and slow), far below the 120 s placement
 * timeout a stuck placement waits out: a request that outlives it was held by the dead process.
 */
const CLIENT_TIMEOUT_MS = 30_000;
/** A large context makes the load slow enough that the kill lands before the worker answers. */
const SLOW_LOAD = fixture('cortex-loop', { context_size: 8192 });

/** Resolves with the line once a process prints one that contains `text`. */
function lineFrom(child: ChildProcess, text: string): Promise<string> {
  return new Promise((resolve) => {
    let buffered = '';
    const onData = (chunk: Buffer): void => {
      buffered += chunk.toString();
      const line = buffered.split('\n').find((l) => l.includes(text));
      if (!line) return;
      child.stdout?.off('data', onData);
      resolve(line);
    };
    child.stdout?.on('data', onData);
  });
}

describe('router faults e2e - a worker killed while it loads', () => {
  let stack: TestStack;
  let client: OpenAI;
  const workers = new Map<string, ChildProcess | undefined>();

  before(async () => {
    stack = await startStack({
      services: ['router', 'translator', 'worker', 'gateway'],
      models: [SLOW_LOAD],
      config: { worker: { id: 'w1' }, log_level: 'info' },
    });
    workers.set('w1', stack.processes.get('worker'));
    workers.set('w2', stack.spawnService('worker', { CORTEX_WORKER_ID: 'w2' }));
    await stack.workersUp(2);
    client = new OpenAI({
      baseURL: `${stack.baseUrl}/v1`,
      apiKey: 'unused',
      maxRetries: 0,
      timeout: CLIENT_TIMEOUT_MS,
    });
  });

  after(async () => {
    await stack?.stop();
  });

  it('router faults - the load moves to another worker once the loading one is declared down', async () => {
    const loads = await watchBus<LoadResult>(stack.nc, everyWorker(Subjects.modelLoaded));
    // Kill the worker the moment the router's load command reaches the bus.
    const killed = new Promise<string>((resolve) => {
      stack.nc.subscribe(Subjects.workerLoad.replace(WORKER_ID_TOKEN, '*'), {
        max: 1,
        callback: (_error, msg) => {
          const workerId = msg.subject.split('.')[3] ?? '';
          workers.get(workerId)?.kill('SIGKILL');
          resolve(workerId);
        },
      });
    });
    await stack.nc.flush();
    const result = await client.chat.completions.create({ model: 'cortex-loop', messages: user, max_tokens: 4 });
    const victim = await killed;
    assert.ok(result.choices[0]?.message.content, 'the client got its answer');
    await waitFor(() => loads.messages.some((l) => l.model === 'cortex-loop'), 5_000);
    await loads.stop();
    assert.deepEqual(
      loads.messages.filter((l) => l.model === 'cortex-loop').map((l) => l.workerId),
      [victim === 'w1' ? 'w2' : 'w1'],
      'the killed worker never finished the load; the survivor did, once',
    );
    assert.match(stack.logs(), new RegExp(`worker ${victim} went down before it answered`));
  });
});

describe('router faults e2e - a router killed while it places a cold request', () => {
  let stack: TestStack;
  let client: OpenAI;
  const routers: ChildProcess[] = [];

  before(async () => {
    stack = await startStack({
      services: ['router', 'translator', 'worker', 'gateway'],
      models: [SLOW_LOAD, fixture('cortex-chat'), fixture('cortex-tools')],
      config: { worker: { id: 'w1' }, log_level: 'info' },
    });
    const first = stack.processes.get('router');
    assert.ok(first);
    routers.push(first, stack.spawnService('router'));
    // Both routers answer in the queue group, and both know the worker.
    await waitFor(async () => {
      const fleets = await Promise.all([0, 1, 2, 3, 4, 5].map(() => stack.fleet()));
      return (
        new Set(fleets.filter((f) => f?.workers.some((w) => w.workerId === 'w1' && w.up)).map((f) => f?.routerId))
          .size === 2
      );
    }, 30_000);
    client = new OpenAI({
      baseURL: `${stack.baseUrl}/v1`,
      apiKey: 'unused',
      maxRetries: 0,
      timeout: CLIENT_TIMEOUT_MS,
    });
  });

  after(async () => {
    await stack?.stop();
  });

  it('router faults - the placement is asked again of the surviving router', async () => {
    // Kill whichever router starts the load, as soon as it says so.
    const killed = Promise.race(
      routers.map((router) => lineFrom(router, '"loading cortex-loop on').then(() => router)),
    ).then(async (router) => {
      const exited = once(router, 'exit');
      router.kill('SIGKILL');
      await exited;
      return router;
    });
    const result = await client.chat.completions.create({ model: 'cortex-loop', messages: user, max_tokens: 4 });
    const victim = await killed;
    assert.ok(result.choices[0]?.message.content, 'the client got its answer');
    assert.equal(victim.signalCode, 'SIGKILL', 'the placing router was killed');
    const survivor = routers.find((r) => r !== victim);
    assert.equal(survivor?.exitCode, null, 'the other router still runs');
    const placers = stack
      .logs()
      .split('\n')
      .filter((line) => line.includes('"placed cortex-loop'))
      .map((line) => (JSON.parse(line) as { pid: number }).pid);
    // Each try the survivor got answers (tries of one run share its placement); the victim answered none.
    assert.ok(placers.length > 0, 'the survivor placed the request');
    assert.deepEqual(
      placers.filter((pid) => pid !== survivor?.pid),
      [],
      'the killed router never answered',
    );
  });

  it('router faults - a load lease left by a dead router is taken over', async () => {
    // Exactly what a router killed between taking the lease and sending the load leaves behind: a
    // lease nobody renews (the key and its base64url model id are the lease's own format).
    const leases = await new Kvm(stack.nc).open('cortex_leases');
    await leases.create(`load.${Buffer.from('cortex-chat').toString('base64url')}`, 'router-that-died');
    const result = await client.chat.completions.create({ model: 'cortex-chat', messages: user });
    assert.equal(result.choices[0]?.message.content, 'Hello from a tiny model.');
    assert.match(stack.logs(), /took over the load lease of cortex-chat from router-that-died/);
  });

  it('router faults - a worker that stalls past its heartbeats is waited for, not reported gone', async () => {
    // SIGSTOP is a real stall: the process keeps its connection and subscriptions, as when its event
    // loop is busy setting up a model, but sends nothing until SIGCONT.
    const worker = stack.processes.get('worker');
    assert.ok(worker);
    const downs = await watchBus<{ workerId: string }>(stack.nc, Subjects.workerDown);
    const probed = new Promise<void>((resolve) => {
      stack.nc.subscribe(Subjects.workerEstimate.replace(WORKER_ID_TOKEN, 'w1'), { max: 1, callback: () => resolve() });
    });
    await stack.nc.flush();
    worker.kill('SIGSTOP');
    try {
      await waitFor(() => downs.messages.some((d) => d.workerId === 'w1'), 10_000);
      const answer = client.chat.completions.create({ model: 'cortex-tools', messages: user, max_tokens: 4 });
      // The router asks the silent worker whether it is still there; that is the moment it resumes.
      await Promise.race([
        probed,
        answer.then(
          () => undefined,
          () => undefined,
        ),
      ]);
      worker.kill('SIGCONT');
      const result = await answer;
      assert.ok(
        ['stop', 'length', 'tool_calls'].includes(result.choices[0]?.finish_reason ?? ''),
        'the client got its answer',
      );
    } finally {
      worker.kill('SIGCONT');
      await downs.stop();
    }
  });

  it('router faults - an admin unload waits for a stalled holder instead of calling the model not loaded', async () => {
    const worker = stack.processes.get('worker');
    assert.ok(worker);
    const bus = new BusClient(stack.nc, 60_000);
    await bus.request(Subjects.routerLoad, { model: 'cortex-chat' });
    const downs = await watchBus<{ workerId: string }>(stack.nc, Subjects.workerDown);
    const asked = new Promise<void>((resolve) => {
      stack.nc.subscribe(Subjects.workerUnload.replace(WORKER_ID_TOKEN, 'w1'), { max: 1, callback: () => resolve() });
    });
    await stack.nc.flush();
    worker.kill('SIGSTOP');
    try {
      await waitFor(() => downs.messages.some((d) => d.workerId === 'w1'), 10_000);
      const unloading = bus.request(Subjects.routerUnload, { model: 'cortex-chat' });
      // The unload command reaching the stalled worker's subject is the moment it resumes.
      await Promise.race([
        asked,
        unloading.then(
          () => undefined,
          () => undefined,
        ),
      ]);
      worker.kill('SIGCONT');
      assert.deepEqual(((await unloading) as { unloaded: string[] }).unloaded, ['w1']);
    } finally {
      worker.kill('SIGCONT');
      await downs.stop();
    }
  });
});
