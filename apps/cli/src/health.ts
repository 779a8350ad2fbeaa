import { checkFleetHealth } from '@cortex/bus';
import { fleetHealth, type FleetHealth, type HealthVerdict } from '@cortex/contracts';
import { print, withBus } from './bus.js';

/** `cortex health`'s exit status per verdict: a script tells ok from impaired from degraded (1 and 2 are this CLI's own failures). */
export const HEALTH_EXIT: Readonly<Record<HealthVerdict, number>> = { ok: 0, impaired: 3, degraded: 4 };

/** The verdict as a person reads it: one word, then why. */
export function formatHealth(health: FleetHealth): string {
  const { up, down, draining } = health.workers;
  const workers = `${up} worker${up === 1 ? '' : 's'} up${draining ? ` (${draining} draining)` : ''}${down ? `, ${down} down` : ''}`;
  const head = `${health.status}: ${health.status === 'ok' ? `every catalogue model can be served; ${workers}` : workers}`;
  return [head, ...health.reasons.map((reason) => `  - ${reason}`)].join('\n');
}

/** `cortex health [--json]`: the fleet's verdict, as the gateway's `GET /health` gives it; the exit status follows it. */
export async function healthCommand(json: boolean): Promise<number> {
  let health: FleetHealth;
  try {
    health = await withBus('health', (_bus, { nc }) => checkFleetHealth(nc));
  } catch (error) {
    // No bus at all is the worst verdict, not a failure of the command.
    health = fleetHealth({ fleet: null, bus: false, jetstreamError: null });
    health.reasons[0] = `${health.reasons[0]} (${(error as Error).message})`;
  }
  print(json, health, () => formatHealth(health));
  return HEALTH_EXIT[health.status];
}
