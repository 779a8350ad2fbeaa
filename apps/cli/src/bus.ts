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
    await nc.close();
  }
}

/** A sentence for people, or with `--json` the data as it is (indented) for scripts; a function is only called for people. */
export function print(json: boolean, data: unknown, sentence: string | (() => string)): void {
  console.log(json ? JSON.stringify(data, null, 2) : typeof sentence === 'function' ? sentence() : sentence);
}
