import { BusClient, connectBus } from '@cortex/bus';
import { loadConfig, type CortexConfig } from '@cortex/config';
import type { NatsConnection } from '@nats-io/transport-node';

/**
 * Runs one command's bus work: reads the config, connects as `cortex-<name>`, hands over a client
 * bounded by the gateway's placement timeout, and closes the connection whatever happens.
 */
export async function withBus<T>(
  name: string,
  work: (bus: BusClient, context: { nc: NatsConnection; config: CortexConfig }) => Promise<T>,
): Promise<T> {
  const { config } = loadConfig();
  const nc = await connectBus({
    url: config.nats.url,
    auth: config.nats,
    replicas: config.nats.replicas,
    name: `cortex-${name}`,
  });
  try {
    return await work(new BusClient(nc, config.gateway.placementTimeoutMs), { nc, config });
  } finally {
    // A server that froze after the connect never acknowledges a close: wait a moment, not for ever.
    await Promise.race([nc.close(), new Promise((done) => setTimeout(done, CLOSE_WAIT_MS).unref())]);
  }
}

/** How long a command waits for its connection's close before it ends anyway. */
const CLOSE_WAIT_MS = 1_000;

/** A sentence for people, or with `--json` the data as it is (indented) for scripts; a function is only called for people. */
export function print(json: boolean, data: unknown, sentence: string | (() => string)): void {
  console.log(json ? JSON.stringify(data, null, 2) : typeof sentence === 'function' ? sentence() : sentence);
}
