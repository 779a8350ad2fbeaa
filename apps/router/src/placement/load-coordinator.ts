import { Inject, Injectable, Logger, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import type { Subscription } from '@nats-io/transport-node';
import { BusClient } from '@cortex/bus';
import { CONFIG, type CortexConfig, type ModelConfig } from '@cortex/config';
import {
  CortexError,
  decodeEstimate,
  decodeLoadFailed,
  decodeLoadResult,
  decodeUnloadResult,
  everyWorker,
  fromWorker,
  mib,
  Subjects,
  type LoadCommand,
  type LoadTrigger,
  type Placement,
  type UnloadReason,
} from '@cortex/contracts';
import { CatalogueService } from '../catalogue/catalogue.service.js';
import { FleetRegistry } from '../fleet/fleet.registry.js';
import { LoadLease } from './load-lease.js';
import { LoadTrace } from './load-trace.js';
import { WorkerCommands } from './worker-commands.js';
import type { ResidentModel } from '../eviction/eviction.policy.js';
import { decide, isBusy, type Decision, type PlaceQuestion, type PlanContext } from './planner.js';

type LoadStep = Extract<Decision, { kind: 'serve' | 'join' | 'load' }>;

/**
 * Carries out the planner's cold-load decisions: one load per model (shared by this router's
 * requests, and across routers through the KV lease), the swap hold and drain of victims, the
 * unload and load commands, and what happens when a worker fails to answer.
 */
@Injectable()
export class LoadCoordinator implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('placement');
  /** Loads cancelled lately (any router's), by model: what requests that waited on them are told. */
  private readonly cancelled = new Map<string, { at: number; error: string }>();
  private cancels: Subscription | null = null;
  /** Loads this router is waiting for, by model; concurrent cold requests in this router share one. */
  private readonly loads = new Map<string, { placed: Promise<Placement>; trace: LoadTrace }>();
  /** Requests in this router waiting for a model to load (or for room to load it), by model; admin loads count too. */
  private readonly waiting = new Map<string, number>();
  /** Of those, the ones that are client requests (what the console shows as waiting on a load). */
  private readonly waitingRequests = new Map<string, number>();
  private turn = 0;

  constructor(
    @Inject(CONFIG) private readonly config: CortexConfig,
    private readonly fleet: FleetRegistry,
    private readonly bus: BusClient,
    private readonly lease: LoadLease,
    private readonly catalogue: CatalogueService,
    private readonly workers: WorkerCommands,
  ) {}

  onModuleInit(): void {
    // Every router hears a cancel: its own requests may wait on a load another router holds the lease of.
    this.cancels = this.bus.subscribe(
      everyWorker(Subjects.modelLoadFailed),
      (data, subject) => {
        const event = fromWorker(subject, decodeLoadFailed(data));
        if (!event.cancelled) return;
        const now = Date.now();
        for (const [model, cancel] of this.cancelled)
          if (now - cancel.at > this.config.gateway.placementTimeoutMs) this.cancelled.delete(model);
        this.cancelled.set(event.model, { at: now, error: event.error });
      },
      (error) => this.logger.warn(`skipped a load_failed event: ${error.message}`),
    );
  }

  onModuleDestroy(): void {
    this.cancels?.unsubscribe();
  }

  /** The planner's answer for this question on the fleet as it is now. */
  decide(question: PlaceQuestion): Decision {
    // Only placements take a turn: the idle sweep and swap holds also read the context, and a turn
    // they took would send two requests in a row to the same one of two equal workers.
    return decide(this.fleet.available(), question, { ...this.context(), turn: this.turn++ });
  }

  context(): PlanContext {
    return {
      now: Date.now(),
      strategy: this.config.eviction.strategy,
      policy: (id) => this.catalogue.policy(id),
      loading: new Set(this.loads.keys()),
      turn: this.turn,
      swapHoldMs: this.config.eviction.swapHoldMs,
    };
  }

  isLoading(modelId: string): boolean {
    return this.loads.has(modelId);
  }

  /** Requests in this router waiting for a model to load (or for room to load it), by model. */
  waitingByModel(): Record<string, number> {
    return Object.fromEntries(this.waitingRequests);
  }

  /**
   * Joins (or starts) the model's load; a bounded number of requests may wait for it. With workers
   * to avoid (a retry, or an admin load on one worker), the load goes through the same fleet-wide
   * lease but is not shared with requests that may use any worker.
   */
  async waitForLoad(
    model: ModelConfig,
    exclude: readonly string[] = [],
    admitted = false,
    trigger: LoadTrigger = 'request',
  ): Promise<Placement> {
    const waiting = this.waiting.get(model.id) ?? 0;
    const bound = this.config.router.maxWaitingPerModel;
    if (waiting >= bound && !admitted) {
      throw new CortexError(
        'busy',
        `${bound} requests already wait for ${model.id} to load; retry shortly (router.max_waiting_per_model)`,
        { retryAfter: 2 },
      );
    }
    this.waiting.set(model.id, waiting + 1);
    if (trigger === 'request') this.waitingRequests.set(model.id, (this.waitingRequests.get(model.id) ?? 0) + 1);
    try {
      return await (exclude.length > 0 ? this.underLease(model, trigger, exclude) : this.loadOnce(model, trigger));
    } finally {
      const left = (this.waiting.get(model.id) ?? 1) - 1;
      if (left > 0) this.waiting.set(model.id, left);
      else this.waiting.delete(model.id);
      if (trigger === 'request') {
        const requests = (this.waitingRequests.get(model.id) ?? 1) - 1;
        if (requests > 0) this.waitingRequests.set(model.id, requests);
        else this.waitingRequests.delete(model.id);
      }
    }
  }

  /** The model's single load in this router, joined or started. */
  loadOnce(model: ModelConfig, trigger: LoadTrigger): Promise<Placement> {
    const running = this.loads.get(model.id);
    if (running) {
      running.trace.joined();
      return running.placed;
    }
    const loadTrace = LoadTrace.start(model.id);
    const placed = loadTrace.run(() => this.underLease(model, trigger)).finally(() => this.loads.delete(model.id));
    this.loads.set(model.id, { placed, trace: loadTrace });
    return placed;
  }

  /**
   * Loads under the fleet-wide lease, or waits for the router that holds it to finish. The lease is
   * not re-entrant, so retries in this router that avoid a worker also load the model only once.
   */
  private async underLease(
    model: ModelConfig,
    trigger: LoadTrigger,
    exclude: readonly string[] = [],
  ): Promise<Placement> {
    const since = Date.now();
    const deadline = since + this.config.gateway.placementTimeoutMs;
    let nextTry = 0;
    for (;;) {
      const now = this.decide({ model, exclude });
      if (now.kind === 'serve') return { model: model.id, workerId: now.workerId, coldStart: true };
      // The load this request waited on was cancelled: it fails too, rather than start the load again.
      const cancel = this.cancelled.get(model.id);
      if (cancel && cancel.at >= since) throw new CortexError('model_load_failed', cancel.error, { retryAfter: 1 });
      // The fleet view is looked at on every change; the lease (a KV round trip) at most every LEASE_RETRY_MS.
      const tryLease = Date.now() >= nextTry;
      if (tryLease) nextTry = Date.now() + LEASE_RETRY_MS;
      if (tryLease && (await this.lease.acquire(model.id))) {
        try {
          return await this.load(model, exclude, trigger);
        } finally {
          await this.lease
            .release(model.id)
            .catch((error: Error) => this.logger.warn(`lease for ${model.id}: ${error.message}`));
        }
      }
      if (Date.now() > deadline)
        throw new CortexError(
          'timeout',
          `${model.id} is still loading after ${this.config.gateway.placementTimeoutMs} ms`,
        );
      await this.fleet.changed(LEASE_RETRY_MS);
    }
  }

  /** Plans and runs the load; a worker that vanished since its last heartbeat is left out and the plan made once more. */
  private async load(model: ModelConfig, exclude: readonly string[], trigger: LoadTrigger): Promise<Placement> {
    const step = await this.nextStep(model, exclude);
    try {
      return await this.carryOut(model, step, trigger);
    } catch (error) {
      if (!(error instanceof CortexError) || error.code !== 'service_unavailable') throw error;
      this.logger.warn(
        `${step.workerId} did not answer the load of ${model.id} (${error.message}); trying another worker`,
      );
      return this.carryOut(model, await this.nextStep(model, [...exclude, step.workerId]), trigger);
    }
  }

  /**
   * The planner's decision once it is one to act on: sizes the model when asked to, waits while
   * models settle (up to the placement timeout), and claims a load plan in the same turn it is made,
   * so no other placement plans with the same room.
   */
  private async nextStep(model: ModelConfig, exclude: readonly string[]): Promise<LoadStep> {
    const deadline = Date.now() + Math.max(0, this.config.gateway.placementTimeoutMs - PLACEMENT_MARGIN_MS);
    for (;;) {
      const decision = this.decide({ model, exclude, needed: this.catalogue.estimate(model.id) });
      switch (decision.kind) {
        case 'serve':
        case 'join':
          return decision;
        case 'load':
          this.claim(model, decision);
          return decision;
        case 'estimate':
          // Read the fleet again after the await: heartbeats and other placements' claims have moved on.
          await this.estimate(model, exclude);
          continue;
        case 'no_worker':
          // A worker whose event loop stalls (setting up a model) misses heartbeats but is not gone.
          if (Date.now() < deadline && (await this.workers.anyStalled(model, exclude))) {
            await this.fleet.changed(SETTLE_POLL_MS);
            continue;
          }
          throw new CortexError(
            'no_worker',
            decision.remote
              ? `no remote worker is up to serve ${model.id} from its upstream; start one with ` +
                  '`CORTEX_WORKER_ENGINE=remote cortex serve worker`'
              : `no worker is up to run ${model.id}; start one with \`cortex serve worker\``,
            { retryAfter: 5 },
          );
        case 'wait':
          if (Date.now() < deadline) {
            await this.fleet.changed(SETTLE_POLL_MS);
            continue;
          }
          throw this.noRoom(
            model,
            this.fleet.available().filter((w) => !exclude.includes(w.workerId)),
          );
        case 'no_room':
          throw this.noRoom(model, [decision.roomiest]);
      }
    }
  }

  /** The model shows as loading on the target (with its memory) and the victims as closing. */
  private claim(model: ModelConfig, plan: Extract<Decision, { kind: 'load' }>): void {
    const now = Date.now();
    this.fleet.noteModel(plan.workerId, {
      id: model.id,
      state: 'loading',
      inFlight: 0,
      queued: 0,
      slots: model.slots,
      lastUsedAt: now,
      sizeBytes: this.catalogue.estimate(model.id),
    });
    for (const victim of plan.victims) this.fleet.claimClosing(plan.workerId, victim.id, plan.closeUntil);
  }

  private async carryOut(model: ModelConfig, step: LoadStep, trigger: LoadTrigger): Promise<Placement> {
    if (step.kind === 'serve') return { model: model.id, workerId: step.workerId, coldStart: true };
    const victims = step.kind === 'load' ? step.victims : [];
    try {
      await this.holdVictims(step.workerId, victims, step.kind === 'load' ? step.closeUntil : 0);
      // Each victim drains and frees on its own: together they take as long as the slowest, not the sum.
      await Promise.all(victims.map((victim) => this.unload(step.workerId, victim.id, this.config.eviction.strategy)));
    } finally {
      for (const victim of victims) this.fleet.releaseClosing(step.workerId, victim.id);
    }
    return this.loadOn(
      model,
      step.workerId,
      victims.map((v) => v.id),
      trigger,
    );
  }

  /**
   * Victims that are still serving keep taking requests until `until` (so requests for them batch in
   * rather than each costing a swap), or until they go idle; then placement stops sending them work
   * and the worker drains them as it unloads.
   */
  private async holdVictims(workerId: string, victims: ReadonlyArray<{ id: string }>, until: number): Promise<void> {
    const busyNow = (): string[] => {
      const models = this.fleet.worker(workerId)?.models ?? [];
      const context = this.context();
      return victims.filter((v) => models.some((m) => m.id === v.id && isBusy(m, context))).map((v) => v.id);
    };
    const busy = busyNow();
    if (busy.length === 0 || Date.now() >= until) return;
    this.logger.log(
      `${busy.join(', ')} on ${workerId} take new requests for ${this.config.eviction.swapHoldMs} ms more, then drain to make room`,
    );
    while (Date.now() < until && busyNow().length > 0) {
      // In-flight counts change with heartbeats; "recently used" runs out on its own.
      await this.fleet.changed(Math.min(RECENT_USE_POLL_MS, until - Date.now()));
    }
  }

  /** Sends the load command and records the model ready on that worker. */
  private async loadOn(
    model: ModelConfig,
    workerId: string,
    evicted: readonly string[],
    trigger: LoadTrigger,
  ): Promise<Placement> {
    const command: LoadCommand = { model: model.id, ...this.catalogue.source(model), trigger };
    this.logger.log(
      `loading ${model.id} on ${workerId} (${trigger})${evicted.length ? ` after evicting ${evicted.join(', ')}` : ''}`,
    );
    const result = await this.workers.ask(workerId, Subjects.workerLoad, command, decodeLoadResult);
    this.catalogue.rememberLoadTime(model.id, result.loadMs);
    this.fleet.noteModel(workerId, {
      id: model.id,
      state: 'ready',
      inFlight: 0,
      queued: 0,
      slots: model.slots,
      lastUsedAt: Date.now(),
      sizeBytes: result.sizeBytes,
    });
    return { model: model.id, workerId, coldStart: true };
  }

  /**
   * Loads another copy of a ready model on `workerId`, after unloading `victims` there (idle models
   * the replication planner chose). The caller holds the model's lease; requests keep going to the
   * copies already serving, and the new copy shows as loading until it is ready.
   */
  async loadCopy(model: ModelConfig, workerId: string, victims: ResidentModel[]): Promise<void> {
    const step = { kind: 'load', workerId, victims, closeUntil: Date.now() } as const;
    this.claim(model, step);
    await this.carryOut(model, step, 'replica');
  }

  /** Asks a worker to unload a model (draining what runs on it) and forgets the model at once. */
  async unload(workerId: string, model: string, reason: UnloadReason): Promise<void> {
    this.logger.log(`unloading ${model} from ${workerId} (${reason})`);
    this.fleet.dropModel(workerId, model);
    await this.workers.ask(workerId, Subjects.workerUnload, { model, reason, drain: true }, decodeUnloadResult);
  }

  /** The model's memory need, as a worker estimates it from the GGUF header (cached per model). */
  private async estimate(model: ModelConfig, exclude: readonly string[]): Promise<number> {
    const workerIds = this.fleet
      .available()
      .map((w) => w.workerId)
      .filter((id) => !exclude.includes(id));
    let failure: unknown = new CortexError(
      'no_worker',
      `no worker is up to run ${model.id}; start one with \`cortex serve worker\``,
      { retryAfter: 5 },
    );
    // A worker may have died since its last heartbeat: ask the next one.
    for (const workerId of workerIds) {
      try {
        const { bytes, facts } = await this.workers.ask(
          workerId,
          Subjects.workerEstimate,
          { model: model.id, ...this.catalogue.source(model) },
          decodeEstimate,
        );
        this.catalogue.rememberEstimate(model.id, bytes, facts);
        return bytes;
      } catch (error) {
        failure = error;
        if (!(error instanceof CortexError) || error.code !== 'service_unavailable') throw error;
      }
    }
    throw failure;
  }

  private noRoom(model: ModelConfig, workers: ReadonlyArray<{ workerId: string; freeBytes: number }>): CortexError {
    const needed = this.catalogue.estimate(model.id) ?? 0;
    const roomiest = workers.reduce((a, b) => (b.freeBytes > a.freeBytes ? b : a), { workerId: 'none', freeBytes: 0 });
    return new CortexError(
      'insufficient_memory',
      `${model.id} needs about ${mib(needed)} and no worker can make room: ${roomiest.workerId} ` +
        `has the most free (${mib(roomiest.freeBytes)}), and the models it could evict ` +
        `under '${this.config.eviction.strategy}' do not free enough (pinned or of higher ` +
        'priority); unload a model, raise worker.memory_budget, or add a worker',
      { retryAfter: 10 },
    );
  }
}

/** How often a closing victim is looked at again while it may only be "recently used". */
const RECENT_USE_POLL_MS = 250;
/**
 * A placement waiting for models to settle looks again at every change of the fleet view, and at
 * least this often (a swap this router finishes changes no heartbeat at once).
 */
const SETTLE_POLL_MS = 250;
/** How often a router waiting for another router's load tries for the load lease (a KV round trip). */
const LEASE_RETRY_MS = 250;
/** A placement gives up this long before the gateway's timeout, so the client hears why. */
const PLACEMENT_MARGIN_MS = 1_000;
