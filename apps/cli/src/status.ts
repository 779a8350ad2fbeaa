import type { NatsConnection } from '@nats-io/transport-node';
import { BusClient, decodeJson } from '@cortex/bus';
import {
  decodeFleetView,
  decodeServicePing,
  isObject,
  mib,
  Subjects,
  workerEventOf,
  type CatalogueEntry,
  type FleetView,
  type ServicePing,
} from '@cortex/contracts';

export interface StatusReport {
  services: ServicePing[];
  fleet: FleetView | null;
  fleetError: string | null;
}

/** Pings every service (each answers on the status subject) and asks a router for the fleet. */
export async function collectStatus(nc: NatsConnection, waitMs = 750): Promise<StatusReport> {
  const services: ServicePing[] = [];
  const replies = await nc.requestMany(Subjects.serviceStatus, undefined, { maxWait: waitMs, strategy: 'timer' });
  try {
    for await (const msg of replies) {
      try {
        services.push(decodeServicePing(decodeJson(msg.data)));
      } catch {
        // One malformed answer (another version?) does not hide the others.
      }
    }
  } catch {
    // No responders: nothing is running; report an empty list.
  }
  let fleet: FleetView | null = null;
  let fleetError: string | null = null;
  try {
    fleet = await new BusClient(nc, 2_000).request(Subjects.routerFleet, {}, { decode: decodeFleetView });
  } catch (error) {
    fleetError = (error as Error).message;
  }
  return { services, fleet, fleetError };
}

export function formatStatus(report: StatusReport): string {
  const lines: string[] = [];
  lines.push('SERVICES');
  const services = [...report.services].sort((a, b) => a.service.localeCompare(b.service) || a.id.localeCompare(b.id));
  lines.push(
    ...table(
      ['service', 'id', 'host', 'pid', 'uptime', 'ready', 'detail'],
      services.map((s) => [
        s.service,
        s.id,
        s.host,
        String(s.pid),
        `${s.uptimeS}s`,
        s.ready ? 'yes' : 'no',
        s.detail ?? '',
      ]),
    ),
  );
  if (services.length === 0) lines.push('  (none answered: is cortex running, and is CORTEX_NATS_URL right?)');
  lines.push('', 'WORKERS');
  if (!report.fleet) {
    lines.push(`  (no router answered: ${report.fleetError})`);
    return lines.join('\n');
  }
  lines.push(
    ...table(
      ['worker', 'state', 'device', 'memory used/free (budget)', 'models (state, in-flight/slots, queued)'],
      report.fleet.workers.map((w) => [
        w.workerId,
        w.up ? (w.draining ? 'draining' : 'up') : downState(w.lastSeenMs, w.forgetInMs),
        `${w.device.kind}: ${w.device.name}`,
        `${mib(w.memory.usedBytes)}/${mib(w.memory.freeBytes)}` +
          `${w.memory.budgetBytes ? ` (${mib(w.memory.budgetBytes)})` : ` (device ${mib(w.device.totalBytes)})`}`,
        w.models.map((m) => `${m.id} (${m.state}, ${m.inFlight}/${m.slots}, ${m.queued})`).join('; ') || '-',
      ]),
    ),
  );
  lines.push('', 'MODELS');
  lines.push(
    ...table(
      ['model', 'loaded', 'copies', 'where', 'pinned', 'context'],
      report.fleet.catalogue.map((m) => [
        m.id,
        m.loaded ? 'yes' : 'no',
        copies(m),
        where(m),
        m.pinned ? 'yes' : 'no',
        String(m.contextSize),
      ]),
    ),
  );
  return lines.join('\n');
}

export function formatModels(catalogue: readonly CatalogueEntry[]): string {
  return table(
    ['model', 'loaded', 'copies', 'where', 'pinned', 'priority', 'context'],
    catalogue.map((m) => [
      m.id,
      m.loaded ? 'yes' : 'no',
      copies(m),
      where(m),
      m.pinned ? 'yes' : 'no',
      String(m.priority),
      String(m.contextSize),
    ]),
  ).join('\n');
}

/** Ready copies and the bounds replication keeps them in: `2 (1-any)`, `1 (1-1)`. */
function copies(m: CatalogueEntry): string {
  if (!m.replicas) return String(m.locations.filter((l) => l.state === 'ready').length);
  return `${m.replicas.ready} (${m.replicas.min}-${m.replicas.max === 0 ? 'any' : m.replicas.max})`;
}

/** A down worker's state column: how long it has been silent, and when routers forget it. */
export function downState(lastSeenMs: number, forgetInMs: number | undefined): string {
  const silent = `${Math.round(lastSeenMs / 1000)}s`;
  return forgetInMs === undefined
    ? `down (${silent})`
    : `down (${silent}; forgotten in ${Math.ceil(forgetInMs / 1000)}s)`;
}

function where(m: CatalogueEntry): string {
  return (
    m.locations
      .map((l) => `${l.workerId}:${l.state}${l.state === 'ready' ? ` ${l.inFlight}+${l.queued}q` : ''}`)
      .join(', ') || '-'
  );
}

function table(header: string[], rows: string[][]): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const render = (row: string[]): string =>
    `  ${row.map((cell, i) => cell.padEnd(widths[i] ?? 0)).join('  ')}`.trimEnd();
  return [render(header), ...rows.map(render)];
}

/** One line for a lifecycle event on `llm.evt.v1.>`, or null for those a fleet view leaves out. */
function formatEvent(subject: string, event: Record<string, unknown>): string | null {
  const at = new Date(typeof event.at === 'number' ? event.at : Date.now()).toISOString().slice(11, 19);
  const worker = String(event.workerId ?? '?');
  const own = workerEventOf(subject);
  // A worker's own event is shown only from that worker (see fromItsWorker).
  if (own && own.workerId !== worker) return null;
  switch (own?.event ?? subject) {
    case Subjects.modelLoaded:
      return `${at}  ${event.model} loaded on ${worker} in ${Math.round(Number(event.loadMs ?? 0))} ms`;
    case Subjects.modelUnloaded:
      return `${at}  ${event.model} unloaded from ${worker} (${event.reason})`;
    case Subjects.modelLoadFailed:
      return `${at}  ${event.model} failed to load on ${worker}: ${event.error}`;
    case Subjects.replicaAdded:
      return `${at}  ${event.model} copied onto ${worker} (${event.reason})`;
    case Subjects.replicaRetired:
      return `${at}  spare copy of ${event.model} retired from ${worker} (${event.reason})`;
    case Subjects.replicaBlocked:
      return `${at}  ${event.model} waits and no copy can be made (${event.reason})`;
    case Subjects.workerUp:
      return `${at}  worker ${worker} up`;
    case Subjects.workerDown:
      return event.reason === 'left' ? `${at}  worker ${worker} left` : `${at}  worker ${worker} down`;
    case Subjects.workerDefragmented:
      return `${at}  worker ${worker} recreated its backend after ${event.cycles} load/unload cycles`;
    default:
      return null;
  }
}

/**
 * `cortex status --watch`: the status again every interval, with the fleet's lifecycle events as they
 * happen. On a terminal the screen is redrawn; otherwise a block is printed whenever the view changes.
 */
export async function watchStatus(nc: NatsConnection, intervalMs: number): Promise<void> {
  const out = process.stdout;
  const events: string[] = [];
  // A message that is not JSON is not an event this view shows: BusClient drops it.
  const sub = new BusClient(nc).subscribe(Subjects.eventsAll, (data, subject) => {
    // Events from other processes: a body that is not an object is skipped; formatEvent reads each field defensively.
    const line = isObject(data) ? formatEvent(subject, data) : null;
    if (line) events.push(line);
    if (events.length > 12) events.shift();
  });
  let stopped = false;
  const stop = (): void => {
    stopped = true;
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  let last = '';
  try {
    while (!stopped && !nc.isClosed()) {
      const view = [
        formatStatus(await collectStatus(nc, Math.min(750, intervalMs))),
        '',
        'EVENTS',
        ...(events.length ? events.map((e) => `  ${e}`) : ['  (none yet)']),
      ].join('\n');
      if (out.isTTY)
        out.write(
          `\x1b[2J\x1b[H${new Date().toISOString().slice(11, 19)}  every ${intervalMs} ms, Ctrl-C to stop\n\n${view}\n`,
        );
      else if (view !== last) out.write(`--- ${new Date().toISOString()}\n${view}\n`);
      last = view;
      await new Promise((done) => setTimeout(done, intervalMs));
    }
  } finally {
    sub.unsubscribe();
  }
}
