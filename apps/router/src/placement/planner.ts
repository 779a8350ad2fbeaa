import { chooseVictims, type EvictionStrategy, type ResidentModel } from '../eviction/eviction.policy.js';
import type { ModelView, WorkerState } from '../fleet/fleet-state.js';

/**
 * The placement rules, as pure functions of a fleet snapshot: no bus, no clock, no state of their own.
 * Every rule in docs/architecture.md ("Placement and eviction") is decided here and tested in
 * planner.spec.ts; the load coordinator only carries decisions out.
 */

/** What placement knows of a catalogue model besides the fleet. */
export interface ModelPolicy {
  pinned: boolean;
  priority: number;
  /** The model's estimated memory, for a model the worker has not sized yet. */
  estimate?: number;
  /** Copies to keep (`min_replicas`, default 1): copies beyond it are spare. */
  minReplicas?: number;
}

export interface PlanContext {
  now: number;
  strategy: EvictionStrategy;
  policy(modelId: string): ModelPolicy;
  /** Models this router is loading right now (their requests are about to be placed). */
  loading: ReadonlySet<string>;
  /** Round-robin counter: equally loaded workers take turns. */
  turn: number;
  /** How long busy victims keep taking requests before they close (`eviction.swap_hold_ms`). */
  swapHoldMs: number;
}

export interface PlaceQuestion {
  /** `upstream`: served from a server or API by a remote worker, never loaded on a local one (and the other way round). */
  model: { id: string; priority: number; workers?: readonly string[]; upstream?: unknown };
  /** Workers to leave out (a retry after they failed, or an admin load on one worker). */
  exclude: readonly string[];
  /** The worker that served this conversation last, if any. */
  affineWorker?: string;
  /** The model's memory need; without it no load can be planned. */
  needed?: number;
}

export type Decision =
  /**
   * The model is ready there: send the request. `sole`: no other worker holds the model and it is not
   * closing there, so every request like this one would be sent there too (see `soleServer`).
   */
  | { kind: 'serve'; workerId: string; sole: boolean }
  /** The model is loading there: wait for that load. */
  | { kind: 'join'; workerId: string }
  /** Load it there after evicting these (possibly none). */
  | { kind: 'load'; workerId: string; victims: ResidentModel[]; closeUntil: number }
  /** The model must be sized before a load can be planned. */
  | { kind: 'estimate' }
  /** Nothing fits now, but would once models loading, unloading or closing settle. */
  | { kind: 'wait' }
  | { kind: 'no_room'; roomiest: WorkerState }
  /** `remote`: the kind of worker the model needs (a remote one for an upstream model). */
  | { kind: 'no_worker'; remote: boolean };

/** Serve, join or load: the first rule that applies wins, in the order the docs list them. */
export function decide(workers: readonly WorkerState[], question: PlaceQuestion, context: PlanContext): Decision {
  const { model, exclude } = question;
  const affine =
    exclude.length === 0 && question.affineWorker
      ? affineWorker(workers, model.id, question.affineWorker, context.now)
      : undefined;
  const serve = (workerId: string): Decision => ({
    kind: 'serve',
    workerId,
    sole: exclude.length === 0 && soleServer(workers, model.id) === workerId,
  });
  if (affine) return serve(affine.workerId);
  const ready = leastLoaded(workers, model.id, 'ready', exclude, context);
  if (ready) return serve(ready.workerId);
  // A load already under way (perhaps started by a router since restarted) is joined, not repeated.
  const loading = leastLoaded(workers, model.id, 'loading', exclude, context);
  if (loading) return { kind: 'join', workerId: loading.workerId };
  const remote = model.upstream !== undefined;
  const up = workers.filter((w) => !exclude.includes(w.workerId) && w.remote === remote);
  if (up.length === 0) return { kind: 'no_worker', remote };
  if (question.needed === undefined) return { kind: 'estimate' };
  return planLoad(up, model, question.needed, context, workers);
}

/**
 * The one worker that holds the model, ready and not closing (no swap hold set), when no other worker
 * holds it in any state: then placement has no choice to make, for any conversation, until the fleet
 * changes. The router lets the gateway reuse such an answer for a moment (`Placement.reuseMs`).
 */
export function soleServer(workers: readonly WorkerState[], modelId: string): string | undefined {
  let found: string | undefined;
  for (const worker of workers) {
    const entry = worker.models.find((m) => m.id === modelId);
    if (!entry) continue;
    if (found !== undefined || entry.state !== 'ready' || entry.closingUntil !== undefined) return undefined;
    found = worker.workerId;
  }
  return found;
}

/**
 * The worker that served the conversation before, while it still has the model ready, open and with
 * nothing queued for it: its sequences hold the conversation's prefix, which beats a less loaded
 * worker that would evaluate the whole prompt again.
 */
export function affineWorker(
  workers: readonly WorkerState[],
  modelId: string,
  workerId: string,
  now: number,
): WorkerState | undefined {
  const worker = workers.find((w) => w.workerId === workerId);
  const entry = worker?.models.find((m) => m.id === modelId && m.state === 'ready');
  return entry && !isClosed(entry, now) && entry.queued === 0 ? worker : undefined;
}

/** What a copy whose upstream does not answer weighs on top of its load: more than any real load. */
const UNREACHABLE_LOAD = 2 ** 40;

/**
 * The least loaded worker (in flight + queued) with the model in this state, copies whose upstream
 * does not answer last (tried only when no other place has it: the request then fails fast and goes
 * to the model's fallback); ties take turns.
 */
function leastLoaded(
  workers: readonly WorkerState[],
  modelId: string,
  state: 'ready' | 'loading',
  exclude: readonly string[],
  context: Pick<PlanContext, 'now' | 'turn'>,
): WorkerState | undefined {
  let best: WorkerState[] = [];
  let bestLoad = Infinity;
  for (const worker of workers) {
    if (exclude.includes(worker.workerId)) continue;
    const entry = worker.models.find((m) => m.id === modelId && m.state === state);
    if (!entry || isClosed(entry, context.now)) continue;
    // A copy whose upstream does not answer comes after every one that does, whatever their load.
    const load = (entry.unreachable ? UNREACHABLE_LOAD : 0) + entry.inFlight + entry.queued;
    if (load < bestLoad) {
      best = [worker];
      bestLoad = load;
    } else if (load === bestLoad) {
      best.push(worker);
    }
  }
  return best[context.turn % Math.max(1, best.length)];
}

/**
 * Where to load: the model's own workers first (in their order), then the plan that evicts the fewest
 * bytes, ties to the most free memory. Models already closing are not counted on twice. Busy victims
 * keep serving for `swapHoldMs` (requests for them batch in) before they close.
 */
function planLoad(
  workers: readonly WorkerState[],
  model: PlaceQuestion['model'],
  needed: number,
  context: PlanContext,
  fleet: readonly WorkerState[],
): Decision {
  const best = bestPlan(workers, model, needed, context, (worker) =>
    resident(worker, context, fleet).filter((m) => m.closingUntil === undefined),
  );
  if (best) {
    const hold = best.victims.some((v) => isBusy(v, context)) ? context.swapHoldMs : 0;
    return { kind: 'load', workerId: best.worker.workerId, victims: best.victims, closeUntil: context.now + hold };
  }
  if (workers.some((w) => fitsOnceSettled(w, model.priority, needed, context))) return { kind: 'wait' };
  return { kind: 'no_room', roomiest: workers.reduce((a, b) => (b.freeBytes > a.freeBytes ? b : a)) };
}

/**
 * The worker to load on, with what to evict there: the model's own workers first (in their order),
 * then the plan that evicts the fewest bytes, ties to the most free memory. `candidates` are the
 * models of a worker that may be evicted.
 */
function bestPlan(
  workers: readonly WorkerState[],
  model: { workers?: readonly string[]; priority: number },
  needed: number,
  context: PlanContext,
  candidates: (worker: WorkerState) => Array<ResidentModel & ModelView>,
): { worker: WorkerState; victims: Array<ResidentModel & ModelView> } | undefined {
  const plans = workers
    .map((worker) => ({
      worker,
      victims: chooseVictims(candidates(worker), worker.freeBytes, needed, context.strategy, model.priority),
    }))
    .filter((p): p is { worker: WorkerState; victims: Array<ResidentModel & ModelView> } => p.victims !== null);
  const evicted = (p: { victims: ResidentModel[] }): number =>
    p.victims.reduce((sum, v) => sum + (v.sizeBytes ?? 0), 0);
  const preference = (p: { worker: WorkerState }): number => {
    const at = model.workers?.indexOf(p.worker.workerId) ?? -1;
    return at === -1 ? Infinity : at;
  };
  plans.sort(
    (a, b) => preference(a) - preference(b) || evicted(a) - evicted(b) || b.worker.freeBytes - a.worker.freeBytes,
  );
  return plans[0];
}

/** Would the model fit once the worker's loading, unloading and closing models have settled and become evictable? */
function fitsOnceSettled(worker: WorkerState, priority: number, needed: number, context: PlanContext): boolean {
  const settling = (m: ModelView): boolean =>
    m.state === 'loading' || m.state === 'unloading' || m.closingUntil !== undefined;
  const models = resident(worker, context, [worker]);
  if (!models.some(settling)) return false;
  const settled = models.map((m) => (settling(m) ? { ...m, state: 'ready' as const } : m));
  return chooseVictims(settled, worker.freeBytes, needed, context.strategy, priority) !== null;
}

/**
 * Serving, queued, placed on so recently that the worker may not have the request yet, or just
 * loaded by this router for requests about to be placed on it (its heartbeat can say ready before
 * the load's reply hands the waiting requests their placement).
 */
export function isBusy(
  model: Pick<ModelView, 'id' | 'inFlight' | 'queued' | 'lastUsedAt'>,
  context: Pick<PlanContext, 'now' | 'loading'>,
): boolean {
  return (
    model.inFlight > 0 ||
    model.queued > 0 ||
    context.now - model.lastUsedAt < RECENT_USE_MS ||
    context.loading.has(model.id)
  );
}

/** A closing model whose hold has run out takes no new requests. */
export function isClosed(model: ModelView, now: number): boolean {
  return model.closingUntil !== undefined && now >= model.closingUntil;
}

/**
 * Copies unused for longer than their model's idle TTL (seconds; 0 = never), unless pinned or busy.
 * A model idle as a whole (every ready copy expired) goes; otherwise only its spare copies go, the
 * longest unused first, down to its `min_replicas`: replication would load a copy taken below it
 * straight back.
 */
export function idleExpired(
  workers: readonly WorkerState[],
  ttlOf: (modelId: string) => number,
  context: PlanContext,
): Array<{ workerId: string; model: string }> {
  const byModel = new Map<string, Array<{ workerId: string; model: string; lastUsedAt: number }>>();
  for (const worker of workers) {
    for (const model of resident(worker, context, workers)) {
      const ttl = ttlOf(model.id);
      if (ttl <= 0 || model.pinned || model.state !== 'ready' || model.inFlight > 0 || model.queued > 0) continue;
      if (context.now - model.lastUsedAt < ttl * 1000) continue;
      const copies = byModel.get(model.id) ?? [];
      copies.push({ workerId: worker.workerId, model: model.id, lastUsedAt: model.lastUsedAt });
      byModel.set(model.id, copies);
    }
  }
  const expired: Array<{ workerId: string; model: string }> = [];
  for (const [id, copies] of byModel) {
    const ready = readyCopies(workers, id).length;
    const keep = Math.max(1, context.policy(id).minReplicas ?? 1);
    const going = copies.length >= ready ? copies.length : Math.max(0, Math.min(copies.length, ready - keep));
    copies.sort((a, b) => a.lastUsedAt - b.lastUsedAt);
    for (const { workerId, model } of copies.slice(0, going)) expired.push({ workerId, model });
  }
  return expired;
}

/**
 * The worker's models with what eviction weighs: size (reported, else estimated), pin, priority, and
 * whether the copy is spare. A pin holds one copy of a model, not all: the one on the first worker
 * (by id) that has it ready (see `pinHolder`); the others are spare copies like any model's. A copy is
 * spare while the fleet holds more ready copies of its model than the model's `min_replicas`.
 */
export function resident(
  worker: WorkerState,
  context: Pick<PlanContext, 'policy'>,
  fleet: readonly WorkerState[],
): Array<ResidentModel & ModelView> {
  return worker.models.map((m) => {
    const policy = context.policy(m.id);
    const pinned = policy.pinned && pinHolder(fleet, m.id) === worker.workerId;
    const spare = m.state === 'ready' && readyCopies(fleet, m.id).length > Math.max(1, policy.minReplicas ?? 1);
    return { ...m, sizeBytes: m.sizeBytes ?? policy.estimate, pinned, priority: policy.priority, spare };
  });
}

/** The worker whose copy of the model a pin holds: the first by id with it ready, else the first with it at all. */
export function pinHolder(workers: readonly WorkerState[], modelId: string): string | undefined {
  const holders = workers.filter((w) => w.models.some((m) => m.id === modelId)).map((w) => w.workerId);
  const ready = readyCopies(workers, modelId).map((c) => c.workerId);
  return [...(ready.length > 0 ? ready : holders)].sort()[0];
}

/** The workers with the model ready and not closing: the copies that serve it. */
function readyCopies(workers: readonly WorkerState[], modelId: string): Array<{ workerId: string; model: ModelView }> {
  const copies: Array<{ workerId: string; model: ModelView }> = [];
  for (const worker of workers) {
    const model = worker.models.find((m) => m.id === modelId && m.state === 'ready' && m.closingUntil === undefined);
    if (model) copies.push({ workerId: worker.workerId, model });
  }
  return copies;
}

/** A request placed this recently may still be on its way to the worker: its model counts as busy. */
export const RECENT_USE_MS = 250;

// Replication: more copies of a model whose requests wait, fewer once they would not wait again.

/** What replication weighs of a catalogue model besides the fleet. */
export interface ReplicaPolicy {
  id: string;
  priority: number;
  /** Copies kept once loaded; fewer are topped up, spare ones retire down to it. */
  minReplicas: number;
  /** Most copies; 0: one per worker. */
  maxReplicas: number;
  /** How long the model's last load took, when this router has seen one. */
  loadMs?: number;
  workers?: readonly string[];
}

/** The `replication` config, in milliseconds. */
export interface ReplicaSettings {
  queuePerSlot: number;
  sustainMs: number;
  retireAfterMs: number;
  retireBelow: number;
}

/** A model's requests across its ready copies. */
export interface Demand {
  copies: number;
  /** Copies loading (or claimed) somewhere. */
  loading: number;
  slots: number;
  inFlight: number;
  queued: number;
}

/**
 * `pressured`: requests wait, `queue_per_slot` or more per slot of the ready copies. `calm`: with one
 * copy fewer, the model's requests (in flight and queued) would still take at most `retire_below` of
 * the remaining slots. Between the two nothing changes: a copy loaded under pressure does not make
 * its model calm at the same demand (it would need a demand below (1 + queue_per_slot) / retire_below
 * times lower), so a copy is never loaded and retired for the same load.
 */
export type Pressure = 'pressured' | 'calm' | 'steady';

export function demand(workers: readonly WorkerState[], modelId: string, now: number): Demand {
  const total: Demand = { copies: 0, loading: 0, slots: 0, inFlight: 0, queued: 0 };
  for (const worker of workers) {
    const model = worker.models.find((m) => m.id === modelId);
    if (!model) continue;
    if (model.state === 'loading') total.loading++;
    if (model.state !== 'ready' || model.closingUntil !== undefined || isClosed(model, now)) continue;
    total.copies++;
    total.slots += model.slots;
    total.inFlight += model.inFlight;
    total.queued += model.queued;
  }
  return total;
}

export function pressure(load: Demand, settings: Pick<ReplicaSettings, 'queuePerSlot' | 'retireBelow'>): Pressure {
  if (load.copies === 0) return 'steady';
  if (load.queued > 0 && load.queued >= settings.queuePerSlot * load.slots) return 'pressured';
  const remaining = (load.slots * (load.copies - 1)) / load.copies;
  if (load.copies > 1 && load.inFlight + load.queued <= settings.retireBelow * remaining) return 'calm';
  return 'steady';
}

export type ReplicaDecision =
  /** Load another copy there, after evicting these idle models (possibly none). */
  | {
      kind: 'replicate';
      model: string;
      workerId: string;
      victims: ResidentModel[];
      reason: 'queue_wait' | 'min_replicas';
    }
  /** Unload that spare copy. */
  | { kind: 'retire'; model: string; workerId: string; reason: 'idle' | 'max_replicas' }
  /** A copy is wanted and no worker can take one: `no_room` is what more workers would relieve. */
  | { kind: 'blocked'; model: string; reason: 'no_room' | 'max_replicas' }
  /** Nothing to do, and why (for tests and logs). */
  | { kind: 'hold'; model: string; reason: 'not_loaded' | 'loading' | 'steady' | 'too_short' | 'unsized' };

export interface ReplicaQuestion {
  model: ReplicaPolicy;
  /** The model's pressure now, and for how long it has been that. */
  pressure: Pressure;
  forMs: number;
  /** The memory a copy takes (a copy's reported size, else the estimate). */
  needed?: number;
}

/**
 * One replication step for a model: top up to `min_replicas`, add a copy under sustained pressure,
 * retire a spare copy after a sustained calm, or hold. One copy at a time: nothing is decided while a
 * copy loads. A copy is loaded only where the model is not, into free memory or in place of idle
 * models of lower priority (or idle spare copies of others) — never a busy model, never a pinned copy.
 */
export function planReplicas(
  workers: readonly WorkerState[],
  question: ReplicaQuestion,
  context: PlanContext,
  settings: ReplicaSettings,
): ReplicaDecision {
  const { model } = question;
  const load = demand(workers, model.id, context.now);
  const hold = (reason: Extract<ReplicaDecision, { kind: 'hold' }>['reason']): ReplicaDecision => ({
    kind: 'hold',
    model: model.id,
    reason,
  });
  if (load.copies === 0) return hold('not_loaded');
  if (load.loading > 0) return hold('loading');
  const most = model.maxReplicas === 0 ? Infinity : model.maxReplicas;
  if (load.copies > most) return retire(workers, model, context, 'max_replicas') ?? hold('steady');
  const copy = (reason: 'queue_wait' | 'min_replicas'): ReplicaDecision => {
    if (question.needed === undefined) return hold('unsized');
    const plan = placeCopy(workers, model, question.needed, context);
    return plan
      ? { kind: 'replicate', model: model.id, workerId: plan.worker.workerId, victims: plan.victims, reason }
      : { kind: 'blocked', model: model.id, reason: 'no_room' };
  };
  if (load.copies < Math.min(model.minReplicas, most)) return copy('min_replicas');
  if (question.pressure === 'pressured') {
    // A burst shorter than a load would be over before the copy could take any of it.
    if (question.forMs < Math.max(settings.sustainMs, model.loadMs ?? 0)) return hold('too_short');
    if (load.copies >= most) return { kind: 'blocked', model: model.id, reason: 'max_replicas' };
    return copy('queue_wait');
  }
  if (question.pressure === 'calm' && load.copies > Math.max(1, model.minReplicas)) {
    if (question.forMs < settings.retireAfterMs) return hold('too_short');
    return retire(workers, model, context, 'idle') ?? hold('steady');
  }
  return hold('steady');
}

/** Where a copy may go: a worker without the model, evicting only idle, unpinned models it may displace. */
function placeCopy(
  workers: readonly WorkerState[],
  model: ReplicaPolicy,
  needed: number,
  context: PlanContext,
): ReturnType<typeof bestPlan> {
  const without = workers.filter((w) => !w.models.some((m) => m.id === model.id));
  const evictable = (m: ResidentModel & ModelView): boolean =>
    m.closingUntil === undefined &&
    !isBusy(m, context) &&
    (m.priority < model.priority || (m.spare === true && m.priority <= model.priority));
  return bestPlan(without, model, needed, context, (worker) => resident(worker, context, workers).filter(evictable));
}

/**
 * The copy to retire: never the pinned one; a copy off the model's own workers first, then the least
 * loaded, then the last by worker id (the first keeps the pin).
 */
function retire(
  workers: readonly WorkerState[],
  model: ReplicaPolicy,
  context: PlanContext,
  reason: 'idle' | 'max_replicas',
): ReplicaDecision | undefined {
  const holder = context.policy(model.id).pinned ? pinHolder(workers, model.id) : undefined;
  const own = (id: string): number => (model.workers?.includes(id) ? 1 : 0);
  const candidates = readyCopies(workers, model.id)
    .filter((c) => c.workerId !== holder)
    .sort(
      (a, b) =>
        own(a.workerId) - own(b.workerId) ||
        a.model.inFlight + a.model.queued - (b.model.inFlight + b.model.queued) ||
        b.workerId.localeCompare(a.workerId),
    );
  const chosen = candidates[0];
  return chosen && { kind: 'retire', model: model.id, workerId: chosen.workerId, reason };
}

/**
 * Since when each model has been in its current pressure. Pure state (the caller gives the time):
 * the replica service feeds it every sweep from the fleet view, which heartbeats rebuild, so a
 * restarted router starts counting afresh and at worst waits one window more.
 */
export class PressureClock {
  private readonly since = new Map<string, { pressure: Pressure; copies: number; at: number }>();

  /**
   * Records the model's pressure now, over `copies` ready copies; returns how long it has held without
   * a break. A change in the number of copies is a break: the demand is spread over another number
   * of copies, whichever router (or idle sweep, or worker) changed it.
   */
  observe(modelId: string, now: Pressure, copies: number, at: number): number {
    const known = this.since.get(modelId);
    if (known?.pressure === now && known.copies === copies) return at - known.at;
    this.since.set(modelId, { pressure: now, copies, at });
    return 0;
  }

  /** After a copy was added or retired, the model's demand must be measured afresh. */
  restart(modelId: string): void {
    this.since.delete(modelId);
  }
}
