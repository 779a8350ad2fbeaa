import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { NatsConnection, Subscription } from '@nats-io/transport-node';
import { BusClient, connectBus, natsServerOnPath, startNatsServer, type LocalNatsServer } from '@cortex/bus';
import { parseConfig } from '@cortex/config';
import { CortexError, Subjects, type Placement, type PlaceRequest } from '@cortex/contracts';
import { PlacementClient, type PlaceAsk } from './placement-client.js';
import { WorkerEvents } from './worker-events.js';

/** What a scripted router answers one place request with. */
type Answer = { ok: true; data: Placement } | { ok: false; error: { code: string; message: string } };

const placed = (workerId: string, reuseMs?: number): Answer => ({
  ok: true,
  data: { model: 'm', workerId, coldStart: false, ...(reuseMs !== undefined && { reuseMs }) },
});

const ask = (over: Partial<PlaceAsk> = {}): PlaceAsk => ({
  model: 'm',
  runId: 'run-1',
  requestId: 'req-1',
  exclude: [],
  onLoadProgress: null,
  signal: new AbortController().signal,
  ...over,
});

describe('placement client - on a real NATS', { skip: !natsServerOnPath() && 'nats-server is not installed' }, () => {
  const storeDir = mkdtempSync(join(tmpdir(), 'cortex-placement-'));
  let server: LocalNatsServer;
  let nc: NatsConnection;
  let router: Subscription | null = null;
  let events: WorkerEvents | null = null;
  /** The place requests the router was sent, in order. */
  let asked: PlaceRequest[] = [];

  before(async () => {
    server = await startNatsServer({ storeDir });
    nc = await connectBus({ url: server.url, name: 'placement-client-spec' });
  });

  afterEach(() => {
    router?.unsubscribe();
    events?.close();
    router = null;
    asked = [];
  });

  after(async () => {
    await nc?.close();
    await server?.stop();
    rmSync(storeDir, { recursive: true, force: true });
  });

  /** A client whose router answers each ask with the next of `answers` (the last one again when they run out). */
  function client(answers: Answer[], gateway: { workerWaitMs?: number } = {}): PlacementClient {
    const bus = new BusClient(nc);
    router = nc.subscribe(Subjects.routerPlace, {
      callback: (_error, msg) => {
        asked.push(msg.json<PlaceRequest>());
        msg.respond(JSON.stringify(answers[Math.min(asked.length, answers.length) - 1]));
      },
    });
    events = new WorkerEvents(bus, { warn: () => undefined });
    const config = { ...parseConfig({}).gateway, ...gateway };
    return new PlacementClient(bus, config, events, { watch: () => () => undefined });
  }

  it(
    'placement client - an answer the router marks reusable is used again ' +
      'without asking, until a model change or a failure of its worker',
    async () => {
      const placer = client([placed('w1', 60_000), placed('w2', 60_000)]);
      assert.deepEqual((await placer.place(ask())).placement.workerId, 'w1');
      const again = await placer.place(ask({ runId: 'run-2' }));
      assert.deepEqual([again.placement.workerId, again.ms], ['w1', null], 'reused: no router asked');
      assert.equal(asked.length, 1);
      placer.forget('w1');
      assert.equal((await placer.place(ask({ runId: 'run-3' }))).placement.workerId, 'w2');
      placer.forgetModel('m');
      await placer.place(ask({ runId: 'run-4' }));
      assert.equal(asked.length, 3);
    },
  );

  it(
    'placement client - a worker-down or model event on ' + 'the bus ends the reuse of the answers it touches',
    async () => {
      const placer = client([placed('w1', 60_000), placed('w1', 60_000), placed('w1', 60_000)]);
      await placer.place(ask());
      await placer.place(ask({ runId: 'run-2' }));
      assert.equal(asked.length, 1, 'reused');
      nc.publish(Subjects.workerDown, JSON.stringify({ workerId: 'w1', at: Date.now() }));
      await nc.flush();
      await new Promise((done) => setTimeout(done, 50));
      await placer.place(ask({ runId: 'run-3' }));
      assert.equal(asked.length, 2, 'the down worker is no longer reused');
      nc.publish(
        `${Subjects.modelUnloaded}.w1`,
        JSON.stringify({ model: 'm', workerId: 'w1', cancelled: 0, reason: 'idle' }),
      );
      await nc.flush();
      await new Promise((done) => setTimeout(done, 50));
      await placer.place(ask({ runId: 'run-4' }));
      assert.equal(asked.length, 3, 'the model left a worker: asked again');
    },
  );

  it('placement client - an answer that is not reusable, or a retry that excludes workers, always asks', async () => {
    const placer = client([placed('w1'), placed('w1', 60_000), placed('w2')]);
    await placer.place(ask());
    await placer.place(ask({ runId: 'run-2' }));
    const retry = await placer.place(ask({ runId: 'run-3', exclude: ['w1'] }));
    assert.equal(retry.placement.workerId, 'w2');
    assert.deepEqual(
      asked.map((a) => [a.runId, a.exclude]),
      [
        ['run-1', []],
        ['run-2', []],
        ['run-3', ['w1']],
      ],
    );
  });

  it('placement client - a router error is the caller’s, as the router said it', async () => {
    const placer = client([{ ok: false, error: { code: 'model_not_found', message: "no model named 'm'" } }]);
    await assert.rejects(
      placer.place(ask()),
      (error: unknown) => error instanceof CortexError && error.code === 'model_not_found',
    );
  });

  it('placement client - no worker yet: waits for one to join, then asks again', async () => {
    const placer = client([{ ok: false, error: { code: 'no_worker', message: 'no worker is up' } }, placed('w1')]);
    const placing = placer.place(ask());
    while (asked.length === 0) await new Promise((done) => setTimeout(done, 5));
    nc.publish(Subjects.workerUp, JSON.stringify({ workerId: 'w1', at: Date.now() }));
    assert.equal((await placing).placement.workerId, 'w1');
    assert.equal(asked.length, 2);
  });

  it(
    'placement client - no worker joins within gateway.worker_wait_ms: ' +
      'no_worker; a client gone meanwhile: cancelled',
    async () => {
      const noWorker: Answer = { ok: false, error: { code: 'no_worker', message: 'no worker is up' } };
      const quick = client([noWorker], { workerWaitMs: 50 });
      await assert.rejects(quick.place(ask()), (error: unknown) => (error as CortexError).code === 'no_worker');
      router?.unsubscribe();
      events?.close();
      asked = [];

      const placer = client([noWorker]);
      const leaving = new AbortController();
      const placing = placer.place(ask({ signal: leaving.signal }));
      while (asked.length === 0) await new Promise((done) => setTimeout(done, 5));
      leaving.abort();
      await assert.rejects(placing, (error: unknown) => (error as CortexError).code === 'cancelled');
    },
  );
});
