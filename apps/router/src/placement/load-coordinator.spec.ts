import { after, afterEach, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { NatsConnection, Subscription } from '@nats-io/transport-node';
import {
  BusClient,
  connectBus,
  ModelCatalogue,
  natsServerOnPath,
  startNatsServer,
  type LocalNatsServer,
} from '@cortex/bus';
import { parseConfig } from '@cortex/config';
import { Subjects, workerSubject, type Heartbeat } from '@cortex/contracts';
import { CatalogueService } from '../catalogue/catalogue.service.js';
import { FleetRegistry } from '../fleet/fleet.registry.js';
import { LoadCoordinator } from './load-coordinator.js';
import { LoadLease } from './load-lease.js';
import { PinStore } from './pin.store.js';
import { WorkerCommands } from './worker-commands.js';

const MIB = 2 ** 20;
const HEARTBEAT_MS = 250;
const config = parseConfig({
  models: [{ id: 'm', file: 'fixture:cortex-chat', context_size: 512, slots: 1 }],
  gateway: { placement_timeout_ms: 15_000 },
});

/** A worker's heartbeat with room for the model and nothing loaded. */
const beat = (workerId: string): Heartbeat =>
  ({
    workerId,
    host: 'spec',
    pid: 1,
    startedAt: 1,
    sentAt: Date.now(),
    intervalMs: HEARTBEAT_MS,
    draining: false,
    device: { name: 'cpu', kind: 'cpu', totalBytes: 8_192 * MIB, freeBytes: 8_192 * MIB },
    memory: { budgetBytes: 0, usedBytes: 0, freeBytes: 8_192 * MIB },
    models: [],
  }) as Heartbeat;

/**
 * The router's load coordinator over a real NATS: its real fleet registry (fed heartbeats), lease,
 * catalogue and worker commands, and scripted workers that answer estimate and load commands.
 */
describe('load coordinator - on a real NATS', { skip: !natsServerOnPath() && 'nats-server is not installed' }, () => {
  const storeDir = mkdtempSync(join(tmpdir(), 'cortex-loads-'));
  let server: LocalNatsServer;
  let nc: NatsConnection;
  let parts: {
    fleet: FleetRegistry;
    lease: LoadLease;
    pins: PinStore;
    catalogue: CatalogueService;
    loads: LoadCoordinator;
  };
  const subscriptions: Subscription[] = [];
  const beating = new Map<string, NodeJS.Timeout>();
  /** The load commands each worker was sent. */
  const loadsSent: string[] = [];

  before(async () => {
    server = await startNatsServer({ storeDir });
    nc = await connectBus({ url: server.url, name: 'load-coordinator-spec' });
  });

  afterEach(() => {
    for (const subscription of subscriptions.splice(0)) subscription.unsubscribe();
    for (const timer of beating.values()) clearInterval(timer);
    beating.clear();
    loadsSent.length = 0;
    parts?.loads.onModuleDestroy();
    parts?.lease.onModuleDestroy();
    parts?.pins.onModuleDestroy();
    parts?.fleet.onModuleDestroy();
    parts?.catalogue.onModuleDestroy();
  });

  after(async () => {
    await nc?.close();
    await server?.stop();
    rmSync(storeDir, { recursive: true, force: true });
  });

  async function coordinator(): Promise<LoadCoordinator> {
    const bus = new BusClient(nc);
    const fleet = new FleetRegistry(bus, config);
    fleet.onModuleInit();
    const lease = new LoadLease(bus, config, `router-${Math.random().toString(36).slice(2)}`);
    await lease.onModuleInit();
    const pins = new PinStore(bus);
    await pins.onModuleInit();
    const catalogue = new CatalogueService(config, fleet, pins, await ModelCatalogue.open(nc, config));
    const loads = new LoadCoordinator(config, fleet, bus, lease, catalogue, new WorkerCommands(config, fleet, bus));
    loads.onModuleInit();
    parts = { fleet, lease, pins, catalogue, loads };
    return loads;
  }

  /** A worker that beats every HEARTBEAT_MS and answers estimates; `load` decides how (and whether) it answers a load. */
  function worker(workerId: string, load: (answer: (envelope: object) => void) => void): { die: () => void } {
    const send = (): void => parts.fleet.accept(beat(workerId));
    send();
    beating.set(workerId, setInterval(send, HEARTBEAT_MS));
    const reply = (data: unknown) => JSON.stringify({ ok: true, data });
    const own = [
      nc.subscribe(workerSubject(Subjects.workerEstimate, workerId), {
        callback: (_e, msg) => void msg.respond(reply({ bytes: 64 * MIB })),
      }),
      nc.subscribe(workerSubject(Subjects.workerLoad, workerId), {
        callback: (_e, msg) => {
          loadsSent.push(workerId);
          load((envelope) => void msg.respond(JSON.stringify(envelope)));
        },
      }),
    ];
    subscriptions.push(...own);
    return {
      // Killed: no more heartbeats, and nothing serves its subjects.
      die: () => {
        clearInterval(beating.get(workerId));
        for (const subscription of own) subscription.unsubscribe();
      },
    };
  }

  const loaded = (workerId: string) => (answer: (envelope: object) => void) =>
    setTimeout(() => answer({ ok: true, data: { model: 'm', workerId, loadMs: 100, sizeBytes: 64 * MIB } }), 100);

  it('load coordinator - requests for a cold model at once share one load, and each is placed where it loaded', async () => {
    const loads = await coordinator();
    worker('w1', loaded('w1'));
    const model = parts.catalogue.model('m');
    const placements = await Promise.all([
      loads.waitForLoad(model),
      loads.waitForLoad(model),
      loads.waitForLoad(model),
    ]);
    assert.deepEqual(loadsSent, ['w1'], 'one load command');
    assert.deepEqual(
      placements.map((p) => [p.workerId, p.coldStart]),
      [
        ['w1', true],
        ['w1', true],
        ['w1', true],
      ],
    );
    assert.equal(loads.isLoading('m'), false);
    assert.deepEqual(loads.waitingByModel(), {}, 'nobody waits any more');
  });

  it(
    'load coordinator - a worker that dies while it loads: once its ' +
      'heartbeats stop and nothing serves it, the load goes to another worker',
    async () => {
      const loads = await coordinator();
      const dying = worker('w1', () => undefined);
      const model = parts.catalogue.model('m');
      const placing = loads.waitForLoad(model);
      while (!loadsSent.includes('w1')) await new Promise((done) => setTimeout(done, 10));
      // w2 joins while w1 holds the load; then w1 is killed.
      worker('w2', loaded('w2'));
      dying.die();
      const placement = await placing;
      assert.equal(placement.workerId, 'w2');
      assert.deepEqual(loadsSent, ['w1', 'w2']);
    },
  );

  it("load coordinator - a load the worker refuses fails its waiting requests with the worker's error", async () => {
    const loads = await coordinator();
    worker('w1', (answer) =>
      setTimeout(
        () => answer({ ok: false, error: { code: 'model_load_failed', message: 'the file is not a GGUF' } }),
        100,
      ),
    );
    const model = parts.catalogue.model('m');
    const both = [loads.waitForLoad(model), loads.waitForLoad(model)];
    for (const placing of both)
      await assert.rejects(placing, (error: unknown) => /not a GGUF/.test((error as Error).message));
    assert.deepEqual(loadsSent, ['w1'], 'one load, one refusal shared');
  });
});
