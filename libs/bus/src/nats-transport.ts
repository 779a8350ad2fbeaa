import { createConnection, type Socket } from 'node:net';
import {
  NatsConnectionImpl,
  setTransportFactory,
  type ConnectionOptions,
  type NatsConnection,
} from '@nats-io/transport-node';
// The Node transport itself is not on the package's entry point; it is the class every connection uses.
import { NodeTransport, nodeResolveHost } from '@nats-io/transport-node/lib/node_transport.js';

/**
 * The Node transport, except that closing one whose handshake never finished closes its socket.
 * nats.js 3.x closes a timed-out dial through `close()`, which does nothing for a transport that is not
 * yet `connected`: against a server that accepts TCP but never sends its INFO (a frozen nats-server,
 * a stalled proxy) or never completes the TCP handshake (a full backlog, a firewall that drops), the
 * socket then stays open, keeping the process alive, and every reconnect attempt leaves one more behind.
 */
export class ClosingTransport extends NodeTransport {
  /** The socket being dialed: the base class holds it only once TCP has connected. */
  private dialing: Socket | null = null;

  override dial(hp: { hostname: string; port: number }): Promise<Socket> {
    return new Promise((resolve, reject) => {
      let failure: Error | undefined;
      const socket = createConnection(hp.port, hp.hostname, () => {
        socket.removeAllListeners();
        resolve(socket);
      });
      this.dialing = socket;
      socket.on('error', (error) => (failure = error));
      socket.on('close', () => {
        socket.removeAllListeners();
        reject(failure ?? new Error(`the connection to ${hp.hostname}:${hp.port} closed while it was made`));
      });
      socket.setNoDelay(true);
    });
  }

  override close(err?: Error): Promise<void> {
    if (!this.connected && !this.done) {
      this.done = true;
      this.dialing?.destroy();
      this.socket?.destroy();
      this.closedNotification.resolve(err);
    }
    return super.close(err);
  }
}

/**
 * `connect` of `@nats-io/transport-node` with ClosingTransport: the transport factory is process-wide
 * and that `connect` sets its own each time, so it is set again right before each connection is made.
 */
export function natsConnect(options: ConnectionOptions): Promise<NatsConnection> {
  setTransportFactory({ factory: () => new ClosingTransport(), dnsResolveFn: nodeResolveHost });
  return NatsConnectionImpl.connect(options);
}
