import { connect, type NatsConnection } from '@nats-io/transport-node';

export interface ConnectOptions {
  url: string;
  /** Shown in `nats server` connection lists: `cortex-<service>`. */
  name: string;
  log?: (line: string) => void;
  /** Keep retrying the first connection (services started before NATS, e.g. in a cluster) instead of failing. */
  waitForServer?: boolean;
}

const connected = new WeakMap<NatsConnection, boolean>();
const reconnects = new WeakMap<NatsConnection, number>();

/** How many times this connection has reconnected since it was opened. */
export function busReconnects(nc: NatsConnection): number {
  return reconnects.get(nc) ?? 0;
}

/** False while the connection is between a disconnect and a reconnect (readiness probes use it). */
export function isBusConnected(nc: NatsConnection): boolean {
  return !nc.isClosed() && !nc.isDraining() && (connected.get(nc) ?? true);
}

/**
 * Connects with unlimited reconnects (a restarted NATS must not kill services) and logs status
 * changes. The first connect fails fast with a hint, since nothing works without the bus.
 */
export async function connectBus(options: ConnectOptions): Promise<NatsConnection> {
  let nc: NatsConnection | null = null;
  for (let attempt = 1; !nc; attempt++) {
    try {
      nc = await connect({
        servers: options.url,
        name: options.name,
        maxReconnectAttempts: -1,
        reconnectTimeWait: 500,
        timeout: 5_000,
      });
    } catch (error) {
      const hint = `cannot reach NATS at ${options.url} (${(error as Error).message}); start nats-server or set CORTEX_NATS_URL`;
      if (!options.waitForServer) throw new Error(hint, { cause: error });
      if (attempt === 1 || attempt % 30 === 0) options.log?.(`${hint}; retrying every second`);
      await new Promise((done) => setTimeout(done, 1_000));
    }
  }
  const connection = nc;
  connected.set(connection, true);
  void (async () => {
    for await (const status of connection.status()) {
      if (status.type === 'disconnect') connected.set(connection, false);
      if (status.type === 'reconnect') {
        connected.set(connection, true);
        reconnects.set(connection, busReconnects(connection) + 1);
      }
      if (status.type === 'disconnect' || status.type === 'reconnect' || status.type === 'error') {
        options.log?.(`nats ${status.type} (${options.url})`);
      }
    }
  })();
  return connection;
}
