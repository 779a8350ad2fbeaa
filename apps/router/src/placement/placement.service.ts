import { Inject, Injectable, Logger, type OnModuleInit } from '@nestjs/common';
import { BusClient } from '@cortex/bus';
import { CONFIG, type CortexConfig, type ModelConfig } from '@cortex/config';
import {
  CortexError,
  Subjects,
  workerSubject,
  type CatalogueEntry,
  type Heartbeat,
  type LoadCommand,
  type LoadResult,
  type Placement,
} from '@cortex/contracts';
import { FleetRegistry } from '../fleet/fleet.registry.js';

/**
 * Decides where a model runs: ready somewhere → least loaded; loading somewhere → join that load;
 * otherwise load it on the worker with the most free memory.
 */
@Injectable()
export class PlacementService implements OnModuleInit {
  private readonly logger = new Logger('placement');
  private readonly byName = new Map<string, ModelConfig>();
  /**
   * Loads this router started and has not seen finish. Concurrent cold requests for one model join
   * one load instead of each starting their own. (Across router replicas the worker's own
   * single-flight covers the same worker; a fleet-wide lease is still to come.)
   */
  private readonly loads = new Map<string, Promise<Placement>>();
  private readonly created = Math.floor(Date.now() / 1000);

  constructor(
    @Inject(CONFIG) private readonly config: CortexConfig,
    private readonly fleet: FleetRegistry,
    private readonly bus: BusClient,
  ) {
    for (const model of config.models) {
      this.byName.set(model.id, model);
      for (const alias of model.aliases ?? []) this.byName.set(alias, model);
    }
  }

  onModuleInit(): void {
    // Pinned models are loaded as soon as a worker can take them.
    this.fleet.onHeartbeat(() => this.ensurePinned());
  }

  async place(name: string): Promise<Placement> {
    const model = this.byName.get(name);
    if (!model) {
      const known = this.config.models.map((m) => m.id).join(', ') || 'none';
      throw new CortexError('model_not_found', `The model '${name}' does not exist; available: ${known}`, { param: 'model' });
    }
    const ready = this.pick(model.id, 'ready');
    if (ready) return { model: model.id, workerId: ready.workerId, coldStart: false };
    return this.loadOnce(model);
  }

  catalogue(): CatalogueEntry[] {
    const workers = this.fleet.available();
    const entries: CatalogueEntry[] = [];
    for (const model of this.config.models) {
      const locations = workers.flatMap((w) =>
        w.models.filter((m) => m.id === model.id).map((m) => ({ workerId: w.workerId, state: m.state, inFlight: m.inFlight, queued: m.queued })),
      );
      const entry: CatalogueEntry = {
        id: model.id,
        ownedBy: model.ownedBy,
        created: this.created,
        contextSize: model.contextSize,
        pinned: model.pinned,
        priority: model.priority,
        loaded: locations.some((l) => l.state === 'ready'),
        locations,
      };
      entries.push(entry, ...(model.aliases ?? []).map((alias) => ({ ...entry, id: alias })));
    }
    return entries;
  }

  private loadOnce(model: ModelConfig): Promise<Placement> {
    let load = this.loads.get(model.id);
    if (!load) {
      load = this.load(model).finally(() => this.loads.delete(model.id));
      this.loads.set(model.id, load);
    }
    return load;
  }

  private async load(model: ModelConfig): Promise<Placement> {
    // A load already running on some worker (started by another router) is joined: the worker
    // answers a second load command with the same in-progress load.
    const target = this.pick(model.id, 'loading') ?? this.chooseWorker(model);
    const command: LoadCommand = { model: model.id, source: model.file, contextSize: model.contextSize, slots: model.slots };
    this.logger.log(`loading ${model.id} on ${target.workerId}`);
    this.fleet.noteModel(target.workerId, { id: model.id, state: 'loading', inFlight: 0, queued: 0, slots: model.slots, lastUsedAt: Date.now() });
    const result = await this.bus.request<LoadResult>(workerSubject(Subjects.workerLoad, target.workerId), command, {
      timeoutMs: this.config.gateway.placementTimeoutMs,
    });
    this.fleet.noteModel(target.workerId, {
      id: model.id,
      state: 'ready',
      inFlight: 0,
      queued: 0,
      slots: model.slots,
      lastUsedAt: Date.now(),
      sizeBytes: result.sizeBytes,
    });
    return { model: model.id, workerId: target.workerId, coldStart: true };
  }

  private pick(modelId: string, state: 'ready' | 'loading'): Heartbeat | undefined {
    let best: Heartbeat | undefined;
    let bestLoad = Infinity;
    for (const worker of this.fleet.available()) {
      const entry = worker.models.find((m) => m.id === modelId && m.state === state);
      if (!entry) continue;
      const load = entry.inFlight + entry.queued;
      if (load < bestLoad) {
        best = worker;
        bestLoad = load;
      }
    }
    return best;
  }

  private chooseWorker(model: ModelConfig): Heartbeat {
    const workers = this.fleet.available();
    if (workers.length === 0) {
      throw new CortexError('no_worker', `no worker is up to run ${model.id}; start one with \`cortex serve worker\``, { retryAfter: 5 });
    }
    return workers.reduce((best, w) => (w.device.freeBytes > best.device.freeBytes ? w : best));
  }

  private ensurePinned(): void {
    for (const model of this.config.models) {
      if (!model.pinned || this.loads.has(model.id)) continue;
      const present = this.fleet.available().some((w) => w.models.some((m) => m.id === model.id && m.state !== 'failed'));
      if (present) continue;
      this.loadOnce(model).catch((error: Error) => this.logger.error(`pinned model ${model.id} failed to load: ${error.message}`));
    }
  }
}
