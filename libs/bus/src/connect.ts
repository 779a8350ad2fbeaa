import type { NatsConnection } from '@nats-io/transport-node';
import { natsConnectOptions, redactNatsUrl, type NatsAuth } from './nats-auth.js';
import { natsConnect } from './nats-transport.js';
import { setStreamReplicas } from './replicas.js';

export interface ConnectOptions {
  url: string;
  /** Shown in `nats server` connection lists: `cortex-<service>`. */
  name: string;
  log?: (line: string) => void;
  /** Keep retrying the first connection (services started before NATS, e.g. in a cluster) instead of failing. */
  waitForServer?: boolean;
  /** Credentials, TLS and inbox prefix (`config.nats`). */
  auth?: NatsAuth;
  /** Copies of each stream and bucket this connection creates (`nats.replicas`; 3 on a NATS cluster). */
  replicas?: number;
  /** How long one connect attempt may take, handshake included (CONNECT_TIMEOUT_MS when absent). */
  timeoutMs?: number;
}

/** How long one connect attempt waits for the server's handshake before it gives up and closes its socket. */
export const CONNECT_TIMEOUT_MS = 5_000;

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
  const shownUrl = redactNatsUrl(options.url);
  // Read once, outside the retry loop: a missing creds or seed file is a mistake to report, not to wait out.
  const auth = natsConnectOptions(options.url, options.auth);
  for (let attempt = 1; !nc; attempt++) {
    try {
      // A server that accepts TCP but never answers (frozen) fails the attempt after the timeout, and
      // its socket is closed with it (see ClosingTransport).
      nc = await natsConnect({
        ...auth,
        name: options.name,
        maxReconnectAttempts: -1,
        reconnectTimeWait: 500,
        timeout: options.timeoutMs ?? CONNECT_TIMEOUT_MS,
        // Without this every request builds two Errors up front just for their stack traces (about
        // 50 µs each on a 2-core VM, three requests per inference); BusClient names the subject in
        // its own errors, so the traces add nothing.
        noAsyncTraces: true,
      });
    } catch (error) {
      const message = (error as Error).message;
      const hint = /authori[sz]ation|authentication|permission/i.test(message)
        ? `NATS at ${shownUrl} refused this connection's credentials (${message}); ` +
          'check nats.user/password, token, creds_file or nkey_seed_file (CORTEX_NATS_*)'
        : `cannot reach NATS at ${shownUrl} (${message}); start nats-server or set CORTEX_NATS_URL`;
      if (!options.waitForServer) throw new Error(hint, { cause: error });
      if (attempt === 1 || attempt % 30 === 0) options.log?.(`${hint}; retrying every second`);
      await new Promise((done) => setTimeout(done, 1_000));
    }
  }
  const connection = nc;
  connected.set(connection, true);
  if (options.replicas !== undefined) setStreamReplicas(connection, options.replicas);
  void (async () => {
    for await (const status of connection.status()) {
      if (status.type === 'disconnect') connected.set(connection, false);
      if (status.type === 'reconnect') {
        connected.set(connection, true);
        reconnects.set(connection, busReconnects(connection) + 1);
      }
      if (status.type === 'disconnect' || status.type === 'reconnect' || status.type === 'error') {
        // The error's text says what the server refused ("Permissions Violation for Publish to …").
        options.log?.(`nats ${status.type} (${shownUrl})${status.type === 'error' ? `: ${status.error.message}` : ''}`);
      }
    }
  })();
  return connection;
}
