import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  decodeFleetView,
  fleetHealth,
  Subjects,
  type FleetHealth,
  type FleetHealthInput,
  type FleetView,
} from '@cortex/contracts';
import { BusClient } from './bus.client.js';
import { isBusConnected } from './connect.js';

/**
 * The fleet's verdict as seen from here (see fleetHealth): a router's view of the fleet and whether
 * JetStream answers, each asked for within `timeoutMs`. The gateway's `GET /health`, `cortex health`
 * and the metrics service's `cortex_fleet_health` all come here; the console makes it from the same
 * reading (readFleetHealth), whose fleet view it shows too.
 */
export async function checkFleetHealth(nc: NatsConnection, timeoutMs = 2_000): Promise<FleetHealth> {
  return fleetHealth(await readFleetHealth(nc, timeoutMs));
}

/** What the verdict is made from, each part asked for within `timeoutMs`. */
export async function readFleetHealth(nc: NatsConnection, timeoutMs = 2_000): Promise<FleetHealthInput> {
  const bus = isBusConnected(nc);
  let fleet: FleetView | null = null;
  let fleetError: string | undefined;
  let jetstreamError: string | null = null;
  if (bus) {
    const [view, account] = await Promise.allSettled([
      new BusClient(nc, timeoutMs).request(Subjects.routerFleet, {}, { decode: decodeFleetView }),
      jetstreamManager(nc, { timeout: timeoutMs }).then((jsm) => jsm.getAccountInfo()),
    ]);
    if (view.status === 'fulfilled') fleet = view.value;
    else fleetError = (view.reason as Error).message;
    if (account.status === 'rejected') jetstreamError = (account.reason as Error).message;
  }
  return { fleet, ...(fleetError !== undefined && { fleetError }), bus, jetstreamError };
}
