import { Inject, Injectable, Logger, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import { CONFIG, type CortexConfig } from '@cortex/config';
import { CortexError, type LoadTrigger, type Placement } from '@cortex/contracts';
import { CatalogueService } from '../catalogue/catalogue.service.js';
import { FleetRegistry } from '../fleet/fleet.registry.js';
import { AffinityTable, prefixKey } from './affinity.table.js';
import { LoadCoordinator } from './load-coordinator.js';
import { idleExpired } from './planner.js';

/**
 * Answers `place`: the planner's decision when the model is ready somewhere, else the model's load
 * (joined or started) through the load coordinator. Also keeps the fleet tidy: unloads models idle
 * past their TTL and loads pinned models as soon as a worker can take them.
 */
@Injectable()
export class PlacementService implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('placement');
  private sweeper: NodeJS.Timeout | null = null;
  /** When each pinned model's last load failed. */
  private readonly pinFailures = new Map<string, number>();
  /** Placements under way by run (and the workers it avoids). */
  private readonly runs = new Map<string, Promise<Placement>>();

  constructor(
    @Inject(CONFIG) private readonly config: CortexConfig,
    private readonly fleet: FleetRegistry,
    private readonly catalogue: CatalogueService,
    private readonly loads: LoadCoordinator,
    private readonly affinity: AffinityTable,
  ) {}

  onModuleInit(): void {
    // Pinned models are loaded as soon as a worker can take them.
    this.fleet.onHeartbeat(() => this.ensurePinned());
    this.sweeper = setInterval(() => this.unloadIdle(), 1_000);
  }

  onModuleDestroy(): void {
    if (this.sweeper) clearInterval(this.sweeper);
  }

  /**
   * `place` for a gateway's run, once: a try the gateway sends again (its router did not answer in
   * time, or died) joins the placement this router already has under way for the run. A try that
   * reaches another router was admitted by the first: it does not count against the waiting bound.
   */
  placeRun(
    run: PlaceOptions & { runId?: string },
    name: string,
    exclude: readonly string[] = [],
    conversation: Conversation = {},
  ): Promise<Placement> {
    if (!run.runId) return this.place(name, exclude, conversation, run);
    const key = `${run.runId}\n${exclude.join('\n')}`;
    let placing = this.runs.get(key);
    if (!placing) {
      placing = this.place(name, exclude, conversation, run).finally(() => this.runs.delete(key));
      this.runs.set(key, placing);
    }
    return placing;
  }

  /**
   * A worker for the model: the conversation's worker (by its affinity key, else by the longest of
   * its prompt's prefixes a request was sent with before), else the least loaded one that has it
   * ready, else the model's load (joined or started); with `readyOnly`, `model_not_ready` at once
   * instead of waiting or loading (the gateway asks so while its request is still being decoded).
   * `exclude` is a retry after those workers failed; it only looks elsewhere (the failed worker is not
   * marked down: it may only have lost this request).
   */
  async place(
    name: string,
    exclude: readonly string[] = [],
    conversation: Conversation = {},
    options: PlaceOptions = {},
  ): Promise<Placement> {
    const model = this.catalogue.model(name);
    const { affinity, prefixes = [] } = conversation;
    const affineWorker =
      (affinity ? this.affinity.workerFor(affinity, model.id) : undefined) ??
      this.affinity.workerForPrefix(prefixes, model.id);
    const decision = this.loads.decide({ model, exclude, affineWorker });
    if (decision.kind !== 'serve' && options.readyOnly)
      throw new CortexError('model_not_ready', `${model.id} is not ready on any worker`);
    const placement: Placement =
      decision.kind === 'serve'
        ? { model: model.id, workerId: decision.workerId, coldStart: false, ...this.reuse(decision.sole) }
        : await this.loads.waitForLoad(model, exclude, options.admitted ?? false, options.trigger ?? 'request');
    this.fleet.touch(placement.workerId, model.id);
    if (affinity) this.affinity.remember(affinity, model.id, placement.workerId);
    // The whole prompt: a follow-up re-sends it and adds to it.
    if (prefixes[0]) this.affinity.remember(prefixKey(prefixes[0]), model.id, placement.workerId);
    return placement;
  }

  /** The gateway may reuse an answer no other worker could have changed (see `soleServer`). */
  private reuse(sole: boolean): Pick<Placement, 'reuseMs'> {
    const reuseMs = this.config.router.placementReuseMs;
    return sole && reuseMs > 0 ? { reuseMs } : {};
  }

  /** Models unused for longer than their idle TTL go, unless pinned or busy. */
  private unloadIdle(): void {
    for (const { workerId, model } of idleExpired(
      this.fleet.available(),
      (id) => this.catalogue.idleTtl(id),
      this.loads.context(),
    )) {
      this.loads
        .unload(workerId, model, 'idle')
        .catch((error: Error) => this.logger.warn(`idle unload of ${model}: ${error.message}`));
    }
  }

  /** Pinned models not loaded anywhere are loaded; one whose load failed is tried again after a pause, not at every heartbeat. */
  ensurePinned(): void {
    const now = Date.now();
    for (const model of this.catalogue.models()) {
      if (!this.catalogue.isPinned(model) || this.loads.isLoading(model.id)) continue;
      if (now - (this.pinFailures.get(model.id) ?? -Infinity) < PIN_RETRY_MS) continue;
      if (this.fleet.available().some((w) => w.models.some((m) => m.id === model.id))) continue;
      this.loads.loadOnce(model, 'pin').then(
        () => this.pinFailures.delete(model.id),
        (error: Error) => {
          this.pinFailures.set(model.id, Date.now());
          this.logger.error(
            `pinned model ${model.id} failed to load (trying again in ${PIN_RETRY_MS / 1000} s): ${error.message}`,
          );
        },
      );
    }
  }
}

/** How long a pinned model whose load failed waits before the next try. */
const PIN_RETRY_MS = 10_000;

/** What names a request's conversation: its affinity key, and its prompt's prefixes (`PlaceRequest`). */
export interface Conversation {
  affinity?: string;
  prefixes?: readonly string[];
}

/** How a placement may go: `admitted` (a try another router already counted), `readyOnly` (no wait, no load). */
export interface PlaceOptions {
  admitted?: boolean;
  readyOnly?: boolean;
  /** What a load this placement starts is for (default: a request). */
  trigger?: LoadTrigger;
}
