import { connect, type NatsConnection } from '@nats-io/transport-node';

export interface ConnectOptions {
  url: string;
  /** Shown in `nats server` connection lists: `cortex-<service>`. */
  name: string;
  log?: (line: string) => void;
}

/**
 * Connects with unlimited reconnects (a restarted NATS must not kill services) and logs status
 * changes. The first connect fails fast with a hint, since nothing works without the bus.
 */
export async function connectBus(options: ConnectOptions): Promise<NatsConnection> {
  let nc: NatsConnection;
  try {
    nc = await connect({
      servers: options.url,
      name: options.name,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 500,
      timeout: 5_000,
    });
  } catch (error) {
    throw new Error(
      `cannot reach NATS at ${options.url} (${(error as Error).message}); start nats-server or set CORTEX_NATS_URL`,
      { cause: error },
    );
  }
  void (async () => {
    for await (const status of nc.status()) {
      if (status.type === 'disconnect' || status.type === 'reconnect' || status.type === 'error') {
        options.log?.(`nats ${status.type} (${options.url})`);
      }
    }
  })();
  return nc;
}
