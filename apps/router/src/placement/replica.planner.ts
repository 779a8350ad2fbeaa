import type { ResidentModel } from '../eviction/eviction.policy.js';
import type { ModelView, WorkerState } from '../fleet/fleet-state.js';
import { bestPlan, isBusy, isClosed, pinHolder, readyCopies, resident, type PlanContext } from './planner.js';

/**
 * Replication: more copies of a model whose requests wait, fewer once they would not wait again. Pure
 * functions of a fleet snapshot on the placement rules' own terms (see planner.ts), tested in
 * planner.spec.ts; ReplicaService carries the decisions out.
 */

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
