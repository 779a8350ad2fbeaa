import { Inject, Injectable, Logger, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import { BusClient } from '@cortex/bus';
import { CONFIG, type CortexConfig, type ModelConfig } from '@cortex/config';
import {
  CortexError,
  Subjects,
  workerSubject,
  type CatalogueEntry,
  type Heartbeat,
  type LoadCommand,
  type ModelCapabilities,
  type Placement,
  type UnloadReason,
  mib,
  decodeEstimate,
  decodeLoadResult,
} from '@cortex/contracts';
import { FleetRegistry } from '../fleet/fleet.registry.js';
import { chooseVictims, type ResidentModel } from '../eviction/eviction.policy.js';
import { LoadLease } from './load-lease.js';
import { PinStore } from './pin.store.js';
import { AffinityTable } from './affinity.table.js';

/**
 * Decides where a model runs: ready somewhere → the conversation's worker (affinity), else the least
 * loaded; loading somewhere → wait for it;
 * otherwise load it where it fits now, or where evicting what it may displace makes room. Nothing
 * feasible → 503 saying why. Also unloads models idle past their TTL.
 */
@Injectable()
export class PlacementService implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('placement');
  private readonly byName = new Map<string, ModelConfig>();
  /**
   * Loads this router is waiting for. Concurrent cold requests in this router share one; across
   * router replicas the KV lease (LoadLease) makes sure only one router loads a model at a time.
   */
  private readonly loads = new Map<string, Promise<Placement>>();
  private readonly estimates = new Map<string, number>();
  /** Capabilities a worker reported for a model, remembered after it is unloaded. */
  private readonly capabilities = new Map<string, ModelCapabilities>();
  private readonly created = Math.floor(Date.now() / 1000);
  private sweeper: NodeJS.Timeout | null = null;
  /**
   * Models another model waits to replace, by worker and model → the time they stop taking new
   * requests. Until then they keep serving (their requests batch in); after it they drain and go.
   */
  private readonly closing = new Map<string, number>();
  /** Requests in this router waiting for a model to load (or for room to load it), by model. */
  private readonly waiting = new Map<string, number>();
  /** Round-robin counter for equally loaded workers. */
  private turn = 0;
  /** When each pinned model's last load failed. */
  private readonly pinFailures = new Map<string, number>();

  constructor(
    @Inject(CONFIG) private readonly config: CortexConfig,
    private readonly fleet: FleetRegistry,
    private readonly bus: BusClient,
    private readonly lease: LoadLease,
    private readonly pins: PinStore,
    private readonly affinity: AffinityTable,
  ) {
    for (const model of config.models) {
      this.byName.set(model.id, model);
      for (const alias of model.aliases ?? []) this.byName.set(alias, model);
    }
  }

  onModuleInit(): void {
    // Pinned models are loaded as soon as a worker can take them.
    this.fleet.onHeartbeat(() => this.ensurePinned());
    this.sweeper = setInterval(() => this.unloadIdle(), 1_000);
  }

  onModuleDestroy(): void {
    if (this.sweeper) clearInterval(this.sweeper);
  }

  /**
   * A worker for the model: the conversation's worker, else the least loaded one that has it ready,
   * else the model's load (joined or started). `exclude` is a retry after those workers failed; it
   * only looks elsewhere (the failed worker is not marked down: it may only have lost this request).
   */
  async place(name: string, exclude: readonly string[] = [], affinity?: string): Promise<Placement> {
    const model = this.model(name);
    const ready = (exclude.length === 0 && affinity && this.affine(model.id, affinity)) || this.pick(model.id, 'ready', exclude);
    const placement = ready ? { model: model.id, workerId: ready.workerId, coldStart: false } : await this.waitForLoad(model, exclude);
    this.fleet.touch(placement.workerId, model.id);
    if (affinity) this.affinity.remember(affinity, model.id, placement.workerId);
    return placement;
  }

  /**
   * The worker that served this conversation before, while it still has the model ready and no
   * request queued for it there: its sequences hold the conversation's prefix, which beats a less
   * loaded worker that would evaluate the whole prompt again.
   */
  private affine(modelId: string, affinity: string): Heartbeat | undefined {
    const workerId = this.affinity.workerFor(affinity, modelId);
    if (!workerId || this.isClosed(workerId, modelId)) return undefined;
    const worker = this.worker(workerId);
    const entry = worker?.models.find((m) => m.id === modelId && m.state === 'ready');
    return entry && entry.queued === 0 ? worker : undefined;
  }

  /**
   * Joins (or starts) the model's load; a bounded number of requests may wait for it. With workers
   * to avoid (a retry, or an admin load on one worker), the load goes through the same fleet-wide
   * lease but is not shared with requests that may use any worker.
   */
  private async waitForLoad(model: ModelConfig, exclude: readonly string[] = []): Promise<Placement> {
    const waiting = this.waiting.get(model.id) ?? 0;
    const bound = this.config.router.maxWaitingPerModel;
    if (waiting >= bound) {
      throw new CortexError('busy', `${bound} requests already wait for ${model.id} to load; retry shortly (router.max_waiting_per_model)`, { retryAfter: 2 });
    }
    this.waiting.set(model.id, waiting + 1);
    try {
      return await (exclude.length > 0 ? this.coordinate(model, exclude) : this.loadOnce(model));
    } finally {
      const left = (this.waiting.get(model.id) ?? 1) - 1;
      if (left > 0) this.waiting.set(model.id, left);
      else this.waiting.delete(model.id);
    }
  }

  /** Admin: load a model now, on the named worker or wherever placement picks. */
  async adminLoad(name: string, workerId?: string): Promise<Placement> {
    const model = this.model(name);
    if (!workerId) return this.place(model.id);
    if (!this.worker(workerId)) throw new CortexError('not_found', `worker ${workerId} is not up; \`cortex status\` lists the workers`);
    // Every other worker excluded: the same lease and load sharing as any placement, on this worker only.
    const others = this.fleet.available().filter((w) => w.workerId !== workerId).map((w) => w.workerId);
    const ready = this.pick(model.id, 'ready', others);
    return ready ? { model: model.id, workerId, coldStart: false } : this.waitForLoad(model, others);
  }

  /** Admin: unload a model from one worker or from all; returns the workers it left. */
  async adminUnload(name: string, workerId?: string): Promise<{ model: string; unloaded: string[] }> {
    const model = this.model(name);
    const holders = this.fleet.available().filter((w) => (!workerId || w.workerId === workerId) && w.models.some((m) => m.id === model.id));
    if (holders.length === 0) throw new CortexError('not_found', `${model.id} is not loaded${workerId ? ` on ${workerId}` : ''}`);
    await Promise.all(holders.map((worker) => this.unload(worker.workerId, model.id, 'admin')));
    return { model: model.id, unloaded: holders.map((w) => w.workerId) };
  }

  async adminPin(name: string, pinned: boolean): Promise<{ model: string; pinned: boolean }> {
    const model = this.model(name);
    await this.pins.set(model.id, pinned);
    this.logger.log(`${model.id} ${pinned ? 'pinned' : 'unpinned'}`);
    if (pinned) this.ensurePinned();
    return { model: model.id, pinned };
  }

  private capabilitiesOf(modelId: string, workers: readonly Heartbeat[]): ModelCapabilities | null {
    const reported = workers.flatMap((w) => w.models).find((m) => m.id === modelId && m.capabilities)?.capabilities;
    if (reported) this.capabilities.set(modelId, reported);
    return this.capabilities.get(modelId) ?? null;
  }

  private model(name: string): ModelConfig {
    const model = this.byName.get(name);
    if (!model) {
      const known = this.config.models.map((m) => m.id).join(', ') || 'none';
      throw new CortexError('model_not_found', `The model '${name}' does not exist; available: ${known}`, { param: 'model' });
    }
    return model;
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
        pinned: this.pins.isPinned(model.id, model.pinned),
        priority: model.priority,
        loaded: locations.some((l) => l.state === 'ready'),
        locations,
        capabilities: this.capabilitiesOf(model.id, workers),
      };
      entries.push(entry, ...(model.aliases ?? []).map((alias) => ({ ...entry, id: alias })));
    }
    return entries;
  }

  private loadOnce(model: ModelConfig): Promise<Placement> {
    let load = this.loads.get(model.id);
    if (!load) {
      load = this.coordinate(model).finally(() => this.loads.delete(model.id));
      this.loads.set(model.id, load);
    }
    return load;
  }

  /**
   * Loads under the fleet-wide lease, or waits for the router that holds it to finish. The lease is
   * not re-entrant, so retries in this router that avoid a worker also load the model only once.
   */
  private async coordinate(model: ModelConfig, exclude: readonly string[] = []): Promise<Placement> {
    const deadline = Date.now() + this.config.gateway.placementTimeoutMs;
    let nextTry = 0;
    for (;;) {
      const ready = this.pick(model.id, 'ready', exclude);
      if (ready) return { model: model.id, workerId: ready.workerId, coldStart: true };
      // The fleet view is looked at on every change; the lease (a KV round trip) at most every LEASE_RETRY_MS.
      const tryLease = Date.now() >= nextTry;
      if (tryLease) nextTry = Date.now() + LEASE_RETRY_MS;
      if (tryLease && (await this.lease.acquire(model.id))) {
        try {
          const loaded = this.pick(model.id, 'ready', exclude);
          return loaded ? { model: model.id, workerId: loaded.workerId, coldStart: true } : await this.load(model, exclude);
        } finally {
          await this.lease.release(model.id).catch((error: Error) => this.logger.warn(`lease for ${model.id}: ${error.message}`));
        }
      }
      if (Date.now() > deadline) throw new CortexError('timeout', `${model.id} is still loading after ${this.config.gateway.placementTimeoutMs} ms`);
      await this.fleet.changed(LEASE_RETRY_MS);
    }
  }

  private async load(model: ModelConfig, exclude: readonly string[]): Promise<Placement> {
    // A load already under way (e.g. started before this router restarted) is joined: the worker
    // answers a second load command with the load in progress.
    const loading = this.pick(model.id, 'loading', exclude);
    const { target, victims } = loading ? { target: loading, victims: [] } : await this.plan(model, exclude);
    try {
      return await this.loadOn(model, target, victims);
    } catch (error) {
      // The chosen worker vanished since its last heartbeat: plan once more without it.
      if (!(error instanceof CortexError) || error.code !== 'service_unavailable') throw error;
      this.logger.warn(`${target.workerId} did not answer the load of ${model.id}; trying another worker`);
      const retry = await this.plan(model, [...exclude, target.workerId]);
      return this.loadOn(model, retry.target, retry.victims);
    }
  }

  private async loadOn(model: ModelConfig, target: Heartbeat, victims: readonly ResidentModel[]): Promise<Placement> {
    try {
      await this.close(target.workerId, victims);
      // Each victim drains and frees on its own: together they take as long as the slowest, not the sum.
      await Promise.all(victims.map((victim) => this.unload(target.workerId, victim.id, this.config.eviction.strategy)));
    } finally {
      for (const victim of victims) this.closing.delete(closingKey(target.workerId, victim.id));
    }
    const command: LoadCommand = { model: model.id, source: model.file, contextSize: model.contextSize, slots: model.slots };
    this.logger.log(`loading ${model.id} on ${target.workerId}${victims.length ? ` after evicting ${victims.map((v) => v.id).join(', ')}` : ''}`);
    const result = await this.bus.request(workerSubject(Subjects.workerLoad, target.workerId), command, {
      decode: decodeLoadResult,
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

  /**
   * Victims that are still serving keep taking requests for `eviction.swap_hold_ms` (so requests for
   * them batch in rather than each costing a swap), or until they go idle; then placement stops sending
   * them work and the worker drains them as it unloads.
   */
  private async close(workerId: string, victims: readonly ResidentModel[]): Promise<void> {
    const busy = victims.filter((v) => this.isBusy(v));
    if (busy.length === 0) return;
    const until = this.closing.get(closingKey(workerId, busy[0]?.id ?? '')) ?? 0;
    this.logger.log(`${busy.map((v) => v.id).join(', ')} on ${workerId} take new requests for ${this.config.eviction.swapHoldMs} ms more, then drain to make room`);
    while (Date.now() < until && busy.some((v) => this.isBusy(this.resident(this.worker(workerId)).find((m) => m.id === v.id) ?? v))) {
      // In-flight counts change with heartbeats; "recently used" runs out on its own.
      await this.fleet.changed(Math.min(RECENT_USE_MS, until - Date.now()));
    }
  }

  /**
   * Serving, queued, placed on so recently that the worker may not have the request yet, or just
   * loaded by this router for requests about to be placed on it (its heartbeat can say ready before
   * the load's reply hands the waiting requests their placement).
   */
  private isBusy(model: ResidentModel): boolean {
    return model.inFlight > 0 || model.queued > 0 || Date.now() - model.lastUsedAt < RECENT_USE_MS || this.loads.has(model.id);
  }

  private worker(workerId: string): Heartbeat | undefined {
    return this.fleet.available().find((w) => w.workerId === workerId);
  }

  private isClosed(workerId: string, modelId: string): boolean {
    const until = this.closing.get(closingKey(workerId, modelId));
    return until !== undefined && Date.now() >= until;
  }

  /** The least loaded worker with the model in this state; equally loaded ones take turns. */
  private pick(modelId: string, state: 'ready' | 'loading', exclude: readonly string[] = []): Heartbeat | undefined {
    let best: Heartbeat[] = [];
    let bestLoad = Infinity;
    for (const worker of this.fleet.available()) {
      if (exclude.includes(worker.workerId) || this.isClosed(worker.workerId, modelId)) continue;
      const entry = worker.models.find((m) => m.id === modelId && m.state === state);
      if (!entry) continue;
      const load = entry.inFlight + entry.queued;
      if (load < bestLoad) {
        best = [worker];
        bestLoad = load;
      } else if (load === bestLoad) {
        best.push(worker);
      }
    }
    return best[this.turn++ % Math.max(1, best.length)];
  }

  /**
   * Where to load: a worker it fits on now (most free memory first), else the one where evicting
   * what the model may displace frees enough with the fewest bytes evicted.
   */
  private async plan(model: ModelConfig, exclude: readonly string[] = []): Promise<{ target: Heartbeat; victims: ResidentModel[] }> {
    const deadline = Date.now() + Math.max(0, this.config.gateway.placementTimeoutMs - PLACEMENT_MARGIN_MS);
    for (;;) {
      const up = (): Heartbeat[] => this.fleet.available().filter((w) => !exclude.includes(w.workerId));
      if (up().length === 0) {
        throw new CortexError('no_worker', `no worker is up to run ${model.id}; start one with \`cortex serve worker\``, { retryAfter: 5 });
      }
      const needed = await this.estimate(model, up().map((w) => w.workerId));
      // Read the fleet again after the await: heartbeats and other placements' claims have moved on.
      const workers = up();
      if (workers.length === 0) continue;
      const best = this.bestPlan(model, workers, needed);
      if (best) {
        this.claim(model, best.target, best.victims);
        return best;
      }
      // Models being loaded, unloaded or swapped out will settle; wait for them rather than fail.
      if (Date.now() < deadline && workers.some((w) => this.fitsOnceSettled(model, w, needed))) {
        await this.fleet.changed(SETTLE_POLL_MS);
        continue;
      }
      throw this.noRoom(model, workers, needed);
    }
  }

  /**
   * Takes the plan's room at once, in the same turn as it was planned: the model shows as loading on
   * the target (with its memory) and the victims as closing, so no other placement plans with them.
   */
  private claim(model: ModelConfig, target: Heartbeat, victims: readonly ResidentModel[]): void {
    this.fleet.noteModel(target.workerId, {
      id: model.id,
      state: 'loading',
      inFlight: 0,
      queued: 0,
      slots: model.slots,
      lastUsedAt: Date.now(),
      sizeBytes: this.estimates.get(model.id),
    });
    const until = Date.now() + (victims.some((v) => this.isBusy(v)) ? this.config.eviction.swapHoldMs : 0);
    for (const victim of victims) this.closing.set(closingKey(target.workerId, victim.id), until);
  }

  private bestPlan(model: ModelConfig, workers: readonly Heartbeat[], needed: number): { target: Heartbeat; victims: ResidentModel[] } | undefined {
    const plans = workers
      .map((worker) => ({
        target: worker,
        victims: chooseVictims(
          this.resident(worker).filter((m) => !this.closing.has(closingKey(worker.workerId, m.id))),
          worker.memory.freeBytes,
          needed,
          this.config.eviction.strategy,
          model.priority,
        ),
      }))
      .filter((p): p is { target: Heartbeat; victims: ResidentModel[] } => p.victims !== null);
    const evicted = (p: { victims: ResidentModel[] }): number => p.victims.reduce((sum, v) => sum + (v.sizeBytes ?? 0), 0);
    // The model's own workers first (in their order), then fewest bytes evicted, then most free memory.
    const preference = (p: { target: Heartbeat }): number => {
      const at = model.workers?.indexOf(p.target.workerId) ?? -1;
      return at === -1 ? Infinity : at;
    };
    plans.sort((a, b) => preference(a) - preference(b) || evicted(a) - evicted(b) || b.target.memory.freeBytes - a.target.memory.freeBytes);
    return plans[0];
  }

  /** Would the model fit once the worker's loading, unloading and closing models have settled and become evictable? */
  private fitsOnceSettled(model: ModelConfig, worker: Heartbeat, needed: number): boolean {
    const settling = (m: ResidentModel): boolean => m.state === 'loading' || m.state === 'unloading' || this.closing.has(closingKey(worker.workerId, m.id));
    const resident = this.resident(worker);
    if (!resident.some(settling)) return false;
    const settled = resident.map((m) => (settling(m) ? { ...m, state: 'ready' as const } : m));
    return chooseVictims(settled, worker.memory.freeBytes, needed, this.config.eviction.strategy, model.priority) !== null;
  }

  private noRoom(model: ModelConfig, workers: readonly Heartbeat[], needed: number): CortexError {
    const roomiest = workers.reduce((a, b) => (b.memory.freeBytes > a.memory.freeBytes ? b : a));
    return new CortexError(
      'insufficient_memory',
      `${model.id} needs about ${mib(needed)} and no worker can make room: ${roomiest.workerId} has the most free (${mib(roomiest.memory.freeBytes)}), and the models it could evict under '${this.config.eviction.strategy}' do not free enough (pinned or of higher priority); unload a model, raise worker.memory_budget, or add a worker`,
      { retryAfter: 10 },
    );
  }

  private resident(worker: Heartbeat | undefined): ResidentModel[] {
    return (worker?.models ?? []).map((m) => {
      const config = this.byName.get(m.id);
      return {
        ...m,
        sizeBytes: m.sizeBytes ?? this.estimates.get(m.id),
        pinned: this.pins.isPinned(m.id, config?.pinned ?? false),
        priority: config?.priority ?? 0,
      };
    });
  }

  /** The model's memory need, as a worker estimates it from the GGUF header (cached per model). */
  private async estimate(model: ModelConfig, workerIds: readonly string[]): Promise<number> {
    const cached = this.estimates.get(model.id);
    if (cached !== undefined) return cached;
    let failure: unknown;
    // A worker may have died since its last heartbeat: ask the next one.
    for (const workerId of workerIds) {
      try {
        const { bytes } = await this.bus.request(
          workerSubject(Subjects.workerEstimate, workerId),
          { source: model.file, contextSize: model.contextSize, slots: model.slots },
          { timeoutMs: this.config.gateway.placementTimeoutMs, decode: decodeEstimate },
        );
        this.estimates.set(model.id, bytes);
        return bytes;
      } catch (error) {
        failure = error;
        if (!(error instanceof CortexError) || error.code !== 'service_unavailable') throw error;
      }
    }
    throw failure;
  }

  private async unload(workerId: string, model: string, reason: UnloadReason): Promise<void> {
    this.logger.log(`unloading ${model} from ${workerId} (${reason})`);
    this.fleet.dropModel(workerId, model);
    await this.bus.request(workerSubject(Subjects.workerUnload, workerId), { model, reason, drain: true }, { timeoutMs: this.config.gateway.placementTimeoutMs });
  }

  /** Models unused for longer than their idle TTL go, unless pinned or busy. */
  private unloadIdle(): void {
    const now = Date.now();
    for (const worker of this.fleet.available()) {
      for (const model of this.resident(worker)) {
        const ttl = this.byName.get(model.id)?.idleTtl ?? this.config.eviction.idleTtl;
        if (ttl <= 0 || model.pinned || model.state !== 'ready' || model.inFlight > 0 || model.queued > 0) continue;
        if (now - model.lastUsedAt < ttl * 1000) continue;
        this.unload(worker.workerId, model.id, 'idle').catch((error: Error) => this.logger.warn(`idle unload of ${model.id}: ${error.message}`));
      }
    }
  }

  /** Pinned models not loaded anywhere are loaded; one whose load failed is tried again after a pause, not at every heartbeat. */
  private ensurePinned(): void {
    const now = Date.now();
    for (const model of this.config.models) {
      if (!this.pins.isPinned(model.id, model.pinned) || this.loads.has(model.id)) continue;
      if (now - (this.pinFailures.get(model.id) ?? -Infinity) < PIN_RETRY_MS) continue;
      const present = this.fleet.available().some((w) => w.models.some((m) => m.id === model.id));
      if (present) continue;
      this.loadOnce(model).then(
        () => this.pinFailures.delete(model.id),
        (error: Error) => {
          this.pinFailures.set(model.id, Date.now());
          this.logger.error(`pinned model ${model.id} failed to load (trying again in ${PIN_RETRY_MS / 1000} s): ${error.message}`);
        },
      );
    }
  }
}

const closingKey = (workerId: string, modelId: string): string => `${workerId}\n${modelId}`;

/** A request placed this recently may still be on its way to the worker: its model counts as busy. */
const RECENT_USE_MS = 250;
/**
 * A placement waiting for models to settle looks again at every change of the fleet view, and at
 * least this often (a swap this router finishes changes no heartbeat at once).
 */
const SETTLE_POLL_MS = 250;
/** How long a pinned model whose load failed waits before the next try. */
const PIN_RETRY_MS = 10_000;
/** How often a router waiting for another router's load tries for the load lease (a KV round trip). */
const LEASE_RETRY_MS = 250;
/** A placement gives up this long before the gateway's timeout, so the client hears why. */
const PLACEMENT_MARGIN_MS = 1_000;
