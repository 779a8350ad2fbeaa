import type { FleetView } from './fleet.messages.js';

/**
 * The fleet in one word: `ok` (everything up), `impaired` (something is down or draining, but every
 * catalogue model can still be served), `degraded` (some model cannot be served, or the bus, its
 * store or every router is gone).
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
 * and not draining: it holds the model, or can load it on demand (a load that cannot fit says so in
 * its request's error).
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
    if (!w.up) impaired.push(`worker ${w.workerId} is down (last seen ${Math.round(w.lastSeenMs / 1000)} s ago)`);
    else if (w.draining) impaired.push(`worker ${w.workerId} is draining`);
  }
  // With a worker that takes new models every model can be served (loaded there on demand); without,
  // only those ready on a worker that still takes requests.
  const serving = (workerId: string): boolean => accepting.some((w) => w.workerId === workerId);
  const unservable =
    accepting.length > 0
      ? []
      : (fleet?.catalogue ?? [])
          .filter((entry) => !entry.locations.some((l) => l.state === 'ready' && serving(l.workerId)))
          .map((entry) => entry.id);
  if (fleet && accepting.length === 0)
    degraded.push(
      workers.length === 0 ? 'no worker has joined' : 'no worker takes new models (every one is down or draining)',
    );
  if (unservable.length > 0)
    degraded.push(
      `${unservable.length} catalogue model${unservable.length === 1 ? '' : 's'} cannot be served: ${unservable.join(', ')}`,
    );
  const status: HealthVerdict = degraded.length > 0 ? 'degraded' : impaired.length > 0 ? 'impaired' : 'ok';
  return {
    status,
    reasons: [...degraded, ...impaired],
    unservable,
    workers: { up: up.length, down: workers.length - up.length, draining: up.length - accepting.length },
  };
}
