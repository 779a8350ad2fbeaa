import { Injectable, Logger } from '@nestjs/common';
import { modelEntry } from '@cortex/config';
import {
  type CatalogueModelReply,
  CortexError,
  decodePullResult,
  type LoadTrigger,
  type Placement,
  PULL_TIMEOUT_MS,
  type PullReply,
  Subjects,
} from '@cortex/contracts';
import { CatalogueService } from '../catalogue/catalogue.service.js';
import { FleetRegistry } from '../fleet/fleet.registry.js';
import { LoadCoordinator } from './load-coordinator.js';
import { PinStore } from './pin.store.js';
import { PlacementService } from './placement.service.js';
import { STALL_GRACE_MS, WorkerCommands } from './worker-commands.js';

/** `cortex load`, `unload`, `pin` and `models add|set|remove`: the same planner and load coordinator as any request. */
@Injectable()
export class AdminService {
  private readonly logger = new Logger('placement');

  constructor(
    private readonly fleet: FleetRegistry,
    private readonly catalogue: CatalogueService,
    private readonly loads: LoadCoordinator,
    private readonly placement: PlacementService,
    private readonly pins: PinStore,
    private readonly workers: WorkerCommands,
  ) {}

  /** Downloads a model's file onto one worker or onto every worker up, ahead of any load. */
  async pull(name: string, workerId: string | undefined, all: boolean): Promise<PullReply> {
    const model = this.catalogue.model(name);
    if (model.upstream)
      throw new CortexError('invalid_request', `${model.id} is served from its upstream and has no file to pull`, {
        param: 'model',
      });
    if (!workerId && !all)
      throw new CortexError('invalid_request', 'name a worker ("worker") or ask for all of them ("all": true)', {
        param: 'worker',
      });
    if (workerId && !this.fleet.worker(workerId))
      throw new CortexError('not_found', `worker ${workerId} is not up; \`cortex status\` lists the workers`);
    const targets = workerId ? [workerId] : this.fleet.available().flatMap((w) => (w.remote ? [] : [w.workerId]));
    if (targets.length === 0)
      throw new CortexError('no_worker', `no worker is up to pull ${model.id} onto`, { retryAfter: 5 });
    const source = this.catalogue.source(model);
    const command = { model: model.id, source: source.source, ...(source.sha256 && { sha256: source.sha256 }) };
    this.logger.log(`pulling ${model.id} onto ${targets.join(', ')}`);
    const pulled = await Promise.all(
      targets.map((id) => this.workers.ask(id, Subjects.workerPull, command, decodePullResult, PULL_TIMEOUT_MS)),
    );
    return { model: model.id, pulled };
  }

  /** Loads a model now, on the named worker or wherever placement picks. */
  async load(
    name: string,
    workerId?: string,
    trigger: Extract<LoadTrigger, 'admin' | 'console'> = 'admin',
  ): Promise<Placement> {
    const model = this.catalogue.model(name);
    if (!workerId) return this.placement.place(model.id, [], {}, { trigger });
    if (!this.fleet.worker(workerId))
      throw new CortexError('not_found', `worker ${workerId} is not up; \`cortex status\` lists the workers`);
    // Every other worker excluded: the same lease and load sharing as any placement, on this worker only.
    const others = this.fleet
      .available()
      .filter((w) => w.workerId !== workerId)
      .map((w) => w.workerId);
    const decision = this.loads.decide({ model, exclude: others });
    return decision.kind === 'serve'
      ? { model: model.id, workerId, coldStart: false }
      : this.loads.waitForLoad(model, others, false, trigger);
  }

  /** Unloads a model from one worker or from all; returns the workers it left. */
  async unload(name: string, workerId?: string): Promise<{ model: string; unloaded: string[] }> {
    const model = this.catalogue.model(name);
    // A holder that missed its last heartbeats may only be stalled: the unload waits for it, or fails if it is dead.
    const holders = this.fleet
      .reachable(STALL_GRACE_MS)
      .filter((w) => (!workerId || w.workerId === workerId) && w.models.some((m) => m.id === model.id));
    if (holders.length === 0)
      throw new CortexError('not_found', `${model.id} is not loaded${workerId ? ` on ${workerId}` : ''}`);
    await Promise.all(holders.map((worker) => this.loads.unload(worker.workerId, model.id, 'admin')));
    return { model: model.id, unloaded: holders.map((w) => w.workerId) };
  }

  /** Adds a model to the live catalogue: every router and gateway serves it from the next request. */
  async addModel(plain: unknown): Promise<CatalogueModelReply> {
    const model = await this.catalogue.store.add(plain);
    this.logger.log(
      `${model.id} added to the catalogue (${model.file ?? `${model.upstream?.api} upstream ${model.upstream?.url}`})`,
    );
    if (this.catalogue.isPinned(model)) this.placement.ensurePinned();
    return { model: modelEntry(model), origin: this.catalogue.store.origin(model.id) };
  }

  /** Changes a model of the catalogue; copies loaded now keep their settings until they load again. */
  async setModel(id: string, fields: unknown): Promise<CatalogueModelReply> {
    const model = await this.catalogue.store.set(this.catalogue.model(id).id, fields);
    this.logger.log(`${model.id} changed in the catalogue: ${Object.keys(fields as object).join(', ')}`);
    if (this.catalogue.isPinned(model)) this.placement.ensurePinned();
    return { model: modelEntry(model), origin: this.catalogue.store.origin(model.id) };
  }

  /**
   * Removes a model: no router places it any more (requests for it are a 404 naming it), then every
   * copy drains (requests already running finish) and unloads.
   */
  async removeModel(id: string): Promise<CatalogueModelReply> {
    const known = this.catalogue.model(id);
    const origin = this.catalogue.store.origin(known.id);
    const model = await this.catalogue.store.remove(known.id);
    const holders = this.fleet.reachable(STALL_GRACE_MS).filter((w) => w.models.some((m) => m.id === model.id));
    this.logger.log(
      `${model.id} removed from the catalogue${holders.length > 0 ? `; draining it on ${holders.map((w) => w.workerId).join(', ')}` : ''}`,
    );
    const unloaded: string[] = [];
    await Promise.all(
      holders.map((worker) =>
        this.loads.unload(worker.workerId, model.id, 'admin').then(
          () => unloaded.push(worker.workerId),
          (error: Error) =>
            this.logger.warn(`unloading the removed ${model.id} from ${worker.workerId}: ${error.message}`),
        ),
      ),
    );
    return { model: modelEntry(model), origin, unloaded: unloaded.sort() };
  }

  async pin(name: string, pinned: boolean): Promise<{ model: string; pinned: boolean }> {
    const model = this.catalogue.model(name);
    await this.pins.set(model.id, pinned);
    this.logger.log(`${model.id} ${pinned ? 'pinned' : 'unpinned'}`);
    if (pinned) this.placement.ensurePinned();
    return { model: model.id, pinned };
  }
}
