import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { NatsConnection } from '@nats-io/transport-node';
import { BusClient, connectBus, natsServerOnPath, startNatsServer, type LocalNatsServer } from '@cortex/bus';
import { parseConfig } from '@cortex/config';
import { CortexError, type LoadCommand } from '@cortex/contracts';
import type { Logger } from '@nestjs/common';
import type { EngineModel, ModelSpec } from './engine/index.js';
import { SyntheticEngine } from './engine/synthetic-engine.js';
import { ModelRegistry } from './model-registry.js';

/** The synthetic engine, whose loads can be held at their start until released (or aborted). */
class HeldEngine extends SyntheticEngine {
  loads = 0;
  disposed = 0;
  private gate: Promise<void> | null = null;

  constructor() {
    super(1000);
  }

  /** Holds the loads that start from now on; the returned function lets them go. */
  hold(): () => void {
    let release: () => void = () => undefined;
    this.gate = new Promise((resolve) => (release = resolve));
    return () => {
      this.gate = null;
      release();
    };
  }

  override async load(
    spec: ModelSpec,
    onProgress?: (fraction: number) => void,
    signal?: AbortSignal,
  ): Promise<EngineModel> {
    this.loads++;
    if (this.gate) {
      const gate = this.gate;
      await new Promise<void>((resolve, reject) => {
        void gate.then(resolve);
        signal?.addEventListener('abort', () => reject(signal.reason as Error), { once: true });
      });
    }
    const model = await super.load(spec, onProgress);
    const dispose = model.dispose.bind(model);
    return Object.assign(model, { dispose: () => ((this.disposed += 1), dispose()) });
  }
}

const quiet = { log: () => undefined, warn: () => undefined, error: () => undefined } as unknown as Logger;
const command = (model: string): LoadCommand => ({ model, source: `fixture:${model}`, contextSize: 512, slots: 1 });
const tick = (): Promise<void> => new Promise((done) => setTimeout(done, 20));

/**
 * The worker's models through their states (model-state.ts) with a real NATS and the synthetic engine:
 * loads and unloads that overlap join, wait for each other, or are cancelled, and the heartbeat's view
 * follows.
 */
describe('model registry', { skip: !natsServerOnPath() && 'nats-server is not installed' }, () => {
  const storeDir = mkdtempSync(join(tmpdir(), 'cortex-registry-'));
  let server: LocalNatsServer;
  let nc: NatsConnection;

  before(async () => {
    server = await startNatsServer({ storeDir });
    nc = await connectBus({ url: server.url, name: 'model-registry-spec' });
  });

  after(async () => {
    await nc?.close();
    await server?.stop();
    rmSync(storeDir, { recursive: true, force: true });
  });

  const registry = (engine: HeldEngine): ModelRegistry =>
    new ModelRegistry({
      config: parseConfig({ worker: { engine: 'synthetic' } }),
      engine,
      workerId: 'w1',
      bus: new BusClient(nc),
      logger: quiet,
      runs: { size: 0, onModel: () => [], cancel: () => false },
      beat: () => Promise.resolve(),
    });
  const states = (models: ModelRegistry): string[] => models.loaded().map((m) => `${m.id} ${m.state}`);

  it('model registry - two loads of one model share one: the engine loads once and both answer', async () => {
    const engine = new HeldEngine();
    const models = registry(engine);
    const release = engine.hold();
    const first = models.load(command('m'));
    const second = models.load(command('m'));
    assert.deepEqual(states(models), ['m loading']);
    release();
    const [a, b] = await Promise.all([first, second]);
    assert.equal(a, b);
    assert.equal(engine.loads, 1);
    assert.deepEqual(states(models), ['m ready']);
    assert.equal((await models.load(command('m'))).loadMs, 0, 'a ready model answers at once');
    assert.equal(models.ready('m').id, 'm');
  });

  it(
    'model registry - an unload asked while the model loads waits ' +
      'for the load, then unloads it; a second unload joins the first',
    async () => {
      const engine = new HeldEngine();
      const models = registry(engine);
      const release = engine.hold();
      const loading = models.load(command('m'));
      const unload = models.unload('m');
      assert.equal(models.unload('m'), unload, 'joined');
      await tick();
      assert.deepEqual(states(models), ['m loading'], 'the load goes on');
      release();
      await loading;
      const result = await unload;
      assert.equal(result.model, 'm');
      assert.deepEqual(states(models), []);
      assert.equal(engine.disposed, 1);
      await assert.rejects(
        models.unload('m'),
        (error: Error) => error instanceof CortexError && error.code === 'not_found',
      );
    },
  );

  it('model registry - a load asked while the model unloads waits for the unload, then loads: the model ends ready', async () => {
    const engine = new HeldEngine();
    const models = registry(engine);
    await models.load(command('m'));
    const unload = models.unload('m');
    assert.deepEqual(states(models), ['m unloading']);
    const again = models.load(command('m'));
    await unload;
    await again;
    assert.deepEqual(states(models), ['m ready'], 'the unload that ended did not remove the new load');
    assert.equal(engine.loads, 2);
  });

  it('model registry - a cancelled load leaves nothing; an unload asked meanwhile answers with nothing cancelled', async () => {
    const engine = new HeldEngine();
    const models = registry(engine);
    const release = engine.hold();
    const loading = models.load(command('m'));
    const unload = models.unload('m', false, 'idle');
    await tick();
    assert.equal(models.cancelLoad('m', 'the test cancels it'), true);
    await assert.rejects(
      loading,
      (error: Error) =>
        error instanceof CortexError &&
        error.code === 'model_load_failed' &&
        /cancelled \(the test cancels it\)/.test(error.message),
    );
    assert.deepEqual(await unload, { model: 'm', workerId: 'w1', cancelled: 0, reason: 'idle' });
    assert.deepEqual(states(models), []);
    assert.equal(models.cancelLoad('m', 'again'), false, 'nothing loads any more');
    release();
  });

  it('model registry - ready() names the state of a model that cannot serve', async () => {
    const engine = new HeldEngine();
    const models = registry(engine);
    assert.throws(() => models.ready('m'), /model m is not loaded on w1/);
    const release = engine.hold();
    const loading = models.load(command('m'));
    assert.throws(
      () => models.ready('m'),
      (error: Error) =>
        error instanceof CortexError && error.code === 'model_not_ready' && /is loading on w1/.test(error.message),
    );
    release();
    await loading;
    const unload = models.unload('m');
    assert.throws(() => models.ready('m'), /is unloading on w1/);
    await unload;
  });
});
