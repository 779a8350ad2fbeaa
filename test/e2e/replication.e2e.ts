import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import {
  everyWorker,
  Subjects,
  type ReplicaEvent,
  type RequestFinishedEvent,
  type UnloadResult,
} from '@cortex/contracts';
import { fixtureEntry, startStack, waitFor, watchBus, type TestStack } from '@cortex/testing';

const user = [{ role: 'user' as const, content: 'Go.' }];
/** Each fixture at context 512 with one slot needs ~1.06 MiB: w2 has room for one, not two. */
const W2_BUDGET = Math.round(1.6 * 2 ** 20);

/**
 * Two workers on separate processes. `hot` (priority 5) and `solo` (max_replicas 1) live on w1, `busy`
 * (priority 0) prefers w2, which has room for one model. Each model has one slot, so four concurrent
 * streams keep three requests queued: above one worker's capacity.
 */
describe('replication e2e', () => {
  let stack: TestStack;
  let client: OpenAI;

  before(async () => {
    stack = await startStack({
      services: ['router', 'translator', 'metrics', 'worker', 'gateway'],
      models: [
        fixtureEntry('cortex-loop', { id: 'hot', pinned: true, priority: 5, workers: ['w1'] }),
        { ...fixtureEntry('cortex-loop', { id: 'solo', max_replicas: 1, workers: ['w1'] }) },
        fixtureEntry('cortex-loop', { id: 'busy', priority: 0, workers: ['w2'] }),
      ],
      config: {
        worker: { id: 'w1', heartbeat_ms: 100, max_queue: 64 },
        eviction: { strategy: 'priority' },
        replication: { sustain_ms: 1_000, retire_after_s: 3, queue_per_slot: 1 },
        router: { placement_reuse_ms: 1_000 },
        log_level: 'info',
      },
    });
    stack.spawnService('worker', { CORTEX_WORKER_ID: 'w2', CORTEX_WORKER_MEMORY_BUDGET: String(W2_BUDGET) });
    await stack.workersUp(2);
    client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
  });

  after(async () => {
    await stack?.stop();
  });

  /** `streams` concurrent request loops on the model until stopped; each request generates 200 tokens. */
  function load(model: string, streams: number): { stop: () => Promise<number> } {
    let running = true;
    let done = 0;
    const loops = Array.from({ length: streams }, async () => {
      while (running) {
        const reply = await client.chat.completions.create({ model, messages: user, max_tokens: 200 });
        assert.equal(reply.choices[0]?.finish_reason, 'length', `${model}: every request is served to its max_tokens`);
        done++;
      }
    });
    return {
      stop: async () => {
        running = false;
        await Promise.all(loops);
        return done;
      },
    };
  }

  const copies = async (model: string): Promise<Array<{ worker: string; state: string }>> =>
    ((await stack.fleet())?.workers ?? []).flatMap((w) =>
      w.models.filter((m) => m.id === model).map((m) => ({ worker: w.workerId, state: m.state })),
    );
  const ready = async (model: string): Promise<string[]> =>
    (await copies(model))
      .filter((c) => c.state === 'ready')
      .map((c) => c.worker)
      .sort();

  it('replication - sustained waits load a second copy and both workers serve; once the load stops the spare copy goes after its idle time', async () => {
    assert.deepEqual(await ready('hot'), ['w1'], 'the pinned model starts with one copy');
    const added = await watchBus<ReplicaEvent>(stack.nc, Subjects.replicaAdded);
    const retired = await watchBus<ReplicaEvent>(stack.nc, Subjects.replicaRetired);
    const finished = await watchBus<RequestFinishedEvent>(stack.nc, Subjects.requestFinished);
    const traffic = load('hot', 4);
    try {
      await waitFor(async () => (await ready('hot')).length === 2, 30_000, 200);
      // A heartbeat can show the copy ready before the router's load call returns and reports it.
      await waitFor(() => added.messages.length > 0, 5_000);
      assert.deepEqual(
        added.messages.map((e) => [e.model, e.workerId, e.reason]),
        [['hot', 'w2', 'queue_wait']],
      );
      const servedBefore = finished.messages.length;
      // Both copies take requests while the load lasts.
      await waitFor(
        () =>
          new Set(
            finished.messages
              .slice(servedBefore)
              .filter((e) => e.model === 'hot')
              .map((e) => e.workerId),
          ).size === 2,
        20_000,
        100,
      );
    } finally {
      await traffic.stop();
    }
    const calmFrom = Date.now();
    await waitFor(async () => (await ready('hot')).length === 1, 30_000, 200);
    const calmFor = Date.now() - calmFrom;
    // The calm may begin while the last requests wind down, up to a request's time before stop() returns.
    assert.ok(
      calmFor >= 2_000,
      `the spare copy stayed through its idle time (retire_after_s 3), went after ${calmFor} ms`,
    );
    assert.deepEqual(await ready('hot'), ['w1'], 'the pinned copy stays; the spare on w2 goes');
    await waitFor(() => retired.messages.length === 1, 5_000);
    assert.deepEqual(
      retired.messages.map((e) => [e.model, e.workerId, e.reason]),
      [['hot', 'w2', 'idle']],
    );
    await Promise.all([added.stop(), retired.stop(), finished.stop()]);
    await waitFor(async () => {
      const text = await (await fetch(`${stack.metricsUrl}/metrics`)).text();
      return (
        text.includes('cortex_replications_total{model="hot",worker="w2",reason="queue_wait"} 1') &&
        text.includes('cortex_replica_retirements_total{model="hot",worker="w2",reason="idle"} 1')
      );
    }, 10_000);
    const models = (await (await fetch(`${stack.baseUrl}/v1/models`)).json()) as {
      data: Array<{ id: string; replicas?: { ready: number; min: number; max: number } }>;
    };
    assert.deepEqual(
      models.data.find((m) => m.id === 'hot')?.replicas,
      { ready: 1, min: 1, max: 0 },
      '/v1/models shows the copies and their bounds',
    );
  });

  it('replication - max_replicas 1 keeps today’s behaviour: one copy however long requests wait', async () => {
    const blocked = await watchBus<ReplicaEvent>(stack.nc, Subjects.replicaBlocked);
    const added = await watchBus<ReplicaEvent>(stack.nc, Subjects.replicaAdded);
    await client.chat.completions.create({ model: 'solo', messages: user, max_tokens: 2 });
    const traffic = load('solo', 4);
    try {
      await waitFor(() => blocked.messages.some((e) => e.model === 'solo' && e.reason === 'max_replicas'), 30_000);
      // Well past the sustain window and the load time: still one copy.
      await new Promise((done) => setTimeout(done, 2_000));
      assert.deepEqual(await copies('solo'), [{ worker: 'w1', state: 'ready' }]);
    } finally {
      await traffic.stop();
    }
    await Promise.all([blocked.stop(), added.stop()]);
    assert.deepEqual(
      added.messages.filter((e) => e.model === 'solo'),
      [],
      'no copy of solo was loaded',
    );
    await client.models.list(); // the gateway still answers
  });

  it('replication - a busy model is never evicted to make room for a copy of another; an idle lower-priority one is', async () => {
    const unloaded = await watchBus<UnloadResult>(stack.nc, everyWorker(Subjects.modelUnloaded));
    const blocked = await watchBus<ReplicaEvent>(stack.nc, Subjects.replicaBlocked);
    const added = await watchBus<ReplicaEvent>(stack.nc, Subjects.replicaAdded);
    const busy = load('busy', 1);
    await waitFor(async () => (await ready('busy')).includes('w2'), 20_000, 200);
    const hot = load('hot', 4);
    try {
      await waitFor(() => blocked.messages.some((e) => e.model === 'hot' && e.reason === 'no_room'), 30_000);
      assert.deepEqual(await ready('hot'), ['w1'], 'no room on w2 while busy serves there');
      assert.deepEqual(await ready('busy'), ['w2']);
      assert.deepEqual(
        unloaded.messages.filter((e) => e.model === 'busy'),
        [],
        'busy was not evicted',
      );
      // Once busy goes idle, it is of lower priority than hot: it makes room for hot's copy.
      await busy.stop();
      await waitFor(async () => (await ready('hot')).length === 2, 30_000, 200);
      await waitFor(() => added.messages.length > 0, 5_000);
    } finally {
      await busy.stop();
      await hot.stop();
    }
    await Promise.all([unloaded.stop(), blocked.stop(), added.stop()]);
    assert.deepEqual(
      added.messages.map((e) => [e.model, e.workerId, e.reason]),
      [['hot', 'w2', 'queue_wait']],
    );
    assert.deepEqual(
      unloaded.messages.filter((e) => e.model === 'busy').map((e) => [e.workerId, e.reason]),
      [['w2', 'priority']],
      'busy was unloaded only once idle',
    );
  });
});
