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
export function bestPlan(
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
export function readyCopies(
  workers: readonly WorkerState[],
  modelId: string,
): Array<{ workerId: string; model: ModelView }> {
  const copies: Array<{ workerId: string; model: ModelView }> = [];
  for (const worker of workers) {
    const model = worker.models.find((m) => m.id === modelId && m.state === 'ready' && m.closingUntil === undefined);
    if (model) copies.push({ workerId: worker.workerId, model });
  }
  return copies;
}

/** A request placed this recently may still be on its way to the worker: its model counts as busy. */
export const RECENT_USE_MS = 250;
