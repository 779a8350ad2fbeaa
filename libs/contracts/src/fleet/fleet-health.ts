import { mib } from '../bus/bus.contract.js';
import type { CatalogueEntry, FleetView, WorkerView } from './fleet.messages.js';

/**
 * The fleet in one word: `ok` (everything up), `impaired` (something is down or draining, or an
 * upstream does not answer, but every catalogue model can still be served), `degraded` (some model cannot be served, or the bus, its
 * store or every router is gone). A worker that said goodbye (a graceful stop) is not in the fleet at
 * all; one that stopped heartbeating is down until routers forget it (`router.forget_worker_after_ms`).
 */
export const HEALTH_VERDICTS = ['ok', 'impaired', 'degraded'] as const;
export type HealthVerdict = (typeof HEALTH_VERDICTS)[number];

export interface FleetHealth {
  status: HealthVerdict;
  /** Why, in sentences (none when ok). */
  reasons: string[];
  /** Catalogue models (and aliases) that no worker serves now or could load. */
  unservable: string[];
  workers: { up: number; down: number; draining: number };
}

/** What the verdict is made from: a router's view of the fleet (null with why, when none answered), the bus, and JetStream. */
export interface FleetHealthInput {
  fleet: FleetView | null;
  fleetError?: string;
  /** The NATS connection is up. */
  bus: boolean;
  /** JetStream's answer: null when it answered, else what went wrong. */
  jetstreamError: string | null;
}

/**
 * The fleet's verdict (a pure decider, table-tested). A model can be served when some worker is up
 * and not draining: it holds the model, or can load it on demand — unless its memory estimate (read
 * when it entered the catalogue) is more than any such worker could hold with nothing else loaded.
 */
export function fleetHealth(input: FleetHealthInput): FleetHealth {
  const degraded: string[] = [];
  const impaired: string[] = [];
  if (!input.bus) degraded.push('NATS is unreachable: no request can be placed');
  else if (input.jetstreamError !== null)
    degraded.push(
      `JetStream does not answer (${input.jetstreamError}): keys, limits, stored responses and events cannot be read or written`,
    );
  const fleet = input.fleet;
  if (input.bus && !fleet)
    degraded.push(`no router answered${input.fleetError ? ` (${input.fleetError})` : ''}: no request can be placed`);
  const workers = fleet?.workers ?? [];
  const up = workers.filter((w) => w.up);
  const accepting = up.filter((w) => !w.draining);
  for (const w of workers) {
    if (!w.up) impaired.push(downReason(w));
    else if (w.draining) impaired.push(`worker ${w.workerId} is draining`);
  }
  // An upstream that does not answer, or answers only with server errors: its model's requests go to the next place or its fallback.
  for (const entry of fleet?.catalogue ?? [])
    for (const l of entry.locations)
      if (l.unreachable && up.some((w) => w.workerId === l.workerId))
        impaired.push(
          `the upstream of ${entry.id} on worker ${l.workerId} is failing (${l.unreachable.error}) since ` +
            `${new Date(l.unreachable.since).toISOString()}: its requests go to another place or its fallback`,
        );
  // With a worker that takes new models every model can be served (loaded there on demand); without,
  // only those ready on a worker that still takes requests.
  const serving = (workerId: string): boolean => accepting.some((w) => w.workerId === workerId);
  const notReady = (fleet?.catalogue ?? []).filter(
    (entry) => !entry.locations.some((l) => l.state === 'ready' && serving(l.workerId)),
  );
  const tooLarge = accepting.length > 0 ? notReady.filter((entry) => fitsNowhere(entry, accepting)) : [];
  const unservable = (accepting.length > 0 ? tooLarge : notReady).map((entry) => entry.id);
  if (fleet && accepting.length === 0)
    degraded.push(
      workers.length === 0 ? 'no worker has joined' : 'no worker takes new models (every one is down or draining)',
    );
  if (unservable.length > 0)
    degraded.push(
      `${unservable.length} catalogue model${unservable.length === 1 ? '' : 's'} cannot be served: ${unservable.join(', ')}`,
    );
  if (tooLarge.length > 0) {
    const largest = accepting.reduce((a, b) => (workerCapacity(b) > workerCapacity(a) ? b : a));
    const most = `the largest, ${largest.workerId}, ${mib(workerCapacity(largest))}`;
    for (const entry of tooLarge)
      degraded.push(
        `${entry.id} needs about ${mib(entry.memoryBytes ?? 0)}, more than any worker can hold (${most}); ` +
          'raise worker.memory_budget, lower its context_size or slots, or add a worker with more memory',
      );
  }
  const status: HealthVerdict = degraded.length > 0 ? 'degraded' : impaired.length > 0 ? 'impaired' : 'ok';
  return {
    status,
    reasons: [...degraded, ...impaired],
    unservable,
    workers: { up: up.length, down: workers.length - up.length, draining: up.length - accepting.length },
  };
}

/** Why a worker that stopped heartbeating impairs the fleet, and for how long it still will. */
function downReason(w: WorkerView): string {
  const seen = `last seen ${Math.round(w.lastSeenMs / 1000)} s ago`;
  const forget =
    w.forgetInMs === undefined ? '' : `; forgotten in ${Math.ceil(w.forgetInMs / 1000)} s unless it heartbeats again`;
  return `worker ${w.workerId} is down: it stopped heartbeating without saying goodbye (${seen}${forget})`;
}

/**
 * The most memory a worker could give one model with nothing else loaded: its budget, capped by its
 * device's whole memory; 0 when neither is known.
 */
export function workerCapacity(worker: Pick<WorkerView, 'memory' | 'device'>): number {
  const budget = worker.memory.budgetBytes;
  const device = worker.device.totalBytes;
  return budget > 0 && device > 0 ? Math.min(budget, device) : Math.max(budget, device, 0);
}

/** A model whose estimate is known and larger than what every one of these workers could hold (one of unknown size may fit). */
function fitsNowhere(entry: CatalogueEntry, workers: readonly WorkerView[]): boolean {
  const needed = entry.memoryBytes;
  if (needed === undefined) return false;
  return workers.every((w) => {
    const capacity = workerCapacity(w);
    return capacity > 0 && capacity < needed;
  });
}
