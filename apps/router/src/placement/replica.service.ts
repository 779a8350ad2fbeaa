import { Inject, Injectable, Logger, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import { BusClient, EventPublisher } from '@cortex/bus';
import { CONFIG, type CortexConfig, type ModelConfig } from '@cortex/config';
import { Subjects, type ReplicaEvent } from '@cortex/contracts';
import { CatalogueService } from '../catalogue/catalogue.service.js';
import { FleetRegistry } from '../fleet/fleet.registry.js';
import { LoadCoordinator } from './load-coordinator.js';
import { LoadLease } from './load-lease.js';
import {
  demand,
  planReplicas,
  pressure,
  PressureClock,
  type ReplicaDecision,
  type ReplicaSettings,
} from './replica.planner.js';

/**
 * Carries out the replication planner's decisions once a second: loads a copy of a model whose
 * requests keep waiting, retires a spare copy once they would not wait without it, and reports a
 * copy that could not be made. A copy is loaded or retired only under the model's load lease, so
 * across router replicas one acts and the others see the result in the heartbeats.
 */
@Injectable()
export class ReplicaService implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('replication');
  private readonly clock = new PressureClock();
  /** Models this router is copying or retiring right now. */
  private readonly acting = new Set<string>();
  /** The last blocked report per model (its message id): one per window is enough. */
  private readonly blocked = new Map<string, string>();
  private readonly events: EventPublisher;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    @Inject(CONFIG) private readonly config: CortexConfig,
    private readonly fleet: FleetRegistry,
    private readonly catalogue: CatalogueService,
    private readonly loads: LoadCoordinator,
    private readonly lease: LoadLease,
    bus: BusClient,
  ) {
    this.events = new EventPublisher(bus.nc);
  }

  onModuleInit(): void {
    this.timer = setInterval(() => this.sweep(), SWEEP_MS);
  }

  onModuleDestroy(): void {
    if (this.timer) clearInterval(this.timer);
  }

  private get settings(): ReplicaSettings {
    const { queuePerSlot, sustainMs, retireAfterS, retireBelow } = this.config.replication;
    return { queuePerSlot, sustainMs, retireAfterMs: retireAfterS * 1000, retireBelow };
  }

  /** One look at every model: its pressure is recorded, and a decision other than hold is carried out. */
  sweep(): void {
    for (const model of this.catalogue.models()) {
      const decision = this.plan(model);
      if (decision.kind === 'hold' || this.acting.has(model.id) || this.loads.isLoading(model.id)) continue;
      this.acting.add(model.id);
      this.act(model, decision)
        .catch((error: Error) => this.logger.warn(`${decision.kind} ${model.id}: ${error.message}`))
        .finally(() => this.acting.delete(model.id));
    }
  }

  private plan(model: ModelConfig): ReplicaDecision {
    const workers = this.fleet.available();
    const context = this.loads.context();
    const load = demand(workers, model.id, context.now);
    const now = pressure(load, this.settings);
    const forMs = this.clock.observe(model.id, now, load.copies, context.now);
    const size =
      workers.flatMap((w) => w.models).find((m) => m.id === model.id && m.sizeBytes)?.sizeBytes ??
      this.catalogue.estimate(model.id);
    return planReplicas(
      workers,
      { model: this.catalogue.replicaPolicy(model), pressure: now, forMs, ...(size !== undefined && { needed: size }) },
      context,
      this.settings,
    );
  }

  private async act(model: ModelConfig, decision: Exclude<ReplicaDecision, { kind: 'hold' }>): Promise<void> {
    if (decision.kind === 'blocked') {
      const id = blockedId(model.id, decision.reason);
      if (this.blocked.get(model.id) === id) return;
      this.blocked.set(model.id, id);
      this.logger.log(`${model.id} waits and no copy can be made (${decision.reason})`);
      return this.report(Subjects.replicaBlocked, { model: model.id, reason: decision.reason, at: Date.now() }, id);
    }
    // Another router may be loading or retiring a copy of this model; it holds the lease, this one waits for the next sweep.
    if (!(await this.lease.acquire(model.id))) return;
    let acted = false;
    try {
      // The fleet has moved since the plan (heartbeats, the lease round trip): act only on a plan that still holds.
      const fresh = this.plan(model);
      if (fresh.kind !== decision.kind || !('workerId' in fresh)) return;
      const at = Date.now();
      if (fresh.kind === 'replicate') {
        const evicting =
          fresh.victims.length > 0 ? ` in place of idle ${fresh.victims.map((v) => v.id).join(', ')}` : '';
        this.logger.log(`copying ${model.id} onto ${fresh.workerId}${evicting} (${fresh.reason})`);
        acted = true;
        await this.loads.loadCopy(model, fresh.workerId, fresh.victims);
        await this.report(
          Subjects.replicaAdded,
          { model: model.id, workerId: fresh.workerId, reason: fresh.reason, at },
          `${model.id}.${fresh.workerId}.added.${at}`,
        );
      } else {
        this.logger.log(`retiring the spare copy of ${model.id} on ${fresh.workerId} (${fresh.reason})`);
        acted = true;
        await this.loads.unload(fresh.workerId, model.id, 'spare');
        await this.report(
          Subjects.replicaRetired,
          { model: model.id, workerId: fresh.workerId, reason: fresh.reason, at },
          `${model.id}.${fresh.workerId}.retired.${at}`,
        );
      }
    } finally {
      // The model's demand is now spread over another number of copies: measure it afresh. A plan
      // that no longer held did nothing, and keeps the time already counted.
      if (acted) this.clock.restart(model.id);
      await this.lease
        .release(model.id)
        .catch((error: Error) => this.logger.warn(`lease for ${model.id}: ${error.message}`));
    }
  }

  private async report(subject: string, event: ReplicaEvent, id: string): Promise<void> {
    await this.events
      .publish(subject, event, id)
      .catch((error: Error) => this.logger.warn(`could not record ${subject}: ${error.message}`));
  }
}

/** How often every model's replication is looked at. */
const SWEEP_MS = 1_000;
/** A copy that cannot be made is reported once per window per model, whichever router sees it (JetStream keeps one per message id). */
const BLOCKED_WINDOW_MS = 10_000;

function blockedId(model: string, reason: string): string {
  return `${model}.blocked.${reason}.${Math.floor(Date.now() / BLOCKED_WINDOW_MS)}`;
}
