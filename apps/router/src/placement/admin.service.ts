import { Injectable, Logger } from '@nestjs/common';
import { CortexError, type LoadTrigger, type Placement } from '@cortex/contracts';
import { CatalogueService } from '../catalogue/catalogue.service.js';
import { FleetRegistry } from '../fleet/fleet.registry.js';
import { LoadCoordinator } from './load-coordinator.js';
import { PinStore } from './pin.store.js';
import { PlacementService } from './placement.service.js';
import { STALL_GRACE_MS } from './worker-commands.js';

/** `cortex load`, `unload` and `pin`: the same planner and load coordinator as any request. */
@Injectable()
export class AdminService {
  private readonly logger = new Logger('placement');

  constructor(
    private readonly fleet: FleetRegistry,
    private readonly catalogue: CatalogueService,
    private readonly loads: LoadCoordinator,
    private readonly placement: PlacementService,
    private readonly pins: PinStore,
  ) {}

  /** Loads a model now, on the named worker or wherever placement picks. */
  async load(name: string, workerId?: string, trigger: Extract<LoadTrigger, 'admin' | 'console'> = 'admin'): Promise<Placement> {
    const model = this.catalogue.model(name);
    if (!workerId) return this.placement.place(model.id, [], undefined, { trigger });
    if (!this.fleet.worker(workerId)) throw new CortexError('not_found', `worker ${workerId} is not up; \`cortex status\` lists the workers`);
    // Every other worker excluded: the same lease and load sharing as any placement, on this worker only.
    const others = this.fleet.available().filter((w) => w.workerId !== workerId).map((w) => w.workerId);
    const decision = this.loads.decide({ model, exclude: others });
    return decision.kind === 'serve' ? { model: model.id, workerId, coldStart: false } : this.loads.waitForLoad(model, others, false, trigger);
  }

  /** Unloads a model from one worker or from all; returns the workers it left. */
  async unload(name: string, workerId?: string): Promise<{ model: string; unloaded: string[] }> {
    const model = this.catalogue.model(name);
    // A holder that missed its last heartbeats may only be stalled: the unload waits for it, or fails if it is dead.
    const holders = this.fleet.reachable(STALL_GRACE_MS).filter((w) => (!workerId || w.workerId === workerId) && w.models.some((m) => m.id === model.id));
    if (holders.length === 0) throw new CortexError('not_found', `${model.id} is not loaded${workerId ? ` on ${workerId}` : ''}`);
    await Promise.all(holders.map((worker) => this.loads.unload(worker.workerId, model.id, 'admin')));
    return { model: model.id, unloaded: holders.map((w) => w.workerId) };
  }

  async pin(name: string, pinned: boolean): Promise<{ model: string; pinned: boolean }> {
    const model = this.catalogue.model(name);
    await this.pins.set(model.id, pinned);
    this.logger.log(`${model.id} ${pinned ? 'pinned' : 'unpinned'}`);
    if (pinned) this.placement.ensurePinned();
    return { model: model.id, pinned };
  }
}
