import { BlockList, isIP, type Socket } from 'node:net';
import type { Server } from 'node:http';

/** How many connections the gateway holds (`gateway.max_connections`, `gateway.max_connections_per_address`); 0: no cap. */
export interface ConnectionCaps {
  total: number;
  perAddress: number;
  /** Addresses or CIDR ranges that are not capped per address: the reverse proxies every client comes through (`gateway.trust_proxy`). */
  exempt: readonly string[];
}

/**
 * Caps the connections the gateway holds: in all (Node's `maxConnections`: past it a connection is
 * closed at once), and per client address, so one address cannot hold every socket (1,000 idle
 * sockets from one address were all accepted). A connection past its address's cap is answered
 * `429` with a JSON error saying so and closed before any request is read. Trusted proxies are not
 * capped per address: every client behind them shares their address.
 */
export function installConnectionCaps(
  server: Server,
  caps: ConnectionCaps,
  refused: (address: string) => void = () => undefined,
): void {
  if (caps.total > 0) server.maxConnections = caps.total;
  if (caps.perAddress <= 0) return;
  const exempt = blockList(caps.exempt);
  const open = new Map<string, number>();
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress ?? '';
    if (isExempt(exempt, address)) return;
    const count = (open.get(address) ?? 0) + 1;
    if (count > caps.perAddress) {
      refused(address);
      const body = JSON.stringify({
        error: {
          message:
            `too many connections from ${address}: at most ${caps.perAddress} at once ` +
            '(gateway.max_connections_per_address); close idle ones or reuse them',
          type: 'rate_limit_error',
          code: 'too_many_connections',
        },
      });
      socket.end(
        'HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\n' +
          `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\nretry-after: 1\r\n\r\n${body}`,
      );
      return;
    }
    open.set(address, count);
    socket.once('close', () => {
      const left = (open.get(address) ?? 1) - 1;
      if (left <= 0) open.delete(address);
      else open.set(address, left);
    });
  });
}

function blockList(entries: readonly string[]): BlockList {
  const list = new BlockList();
  for (const entry of entries) {
    const [address = '', prefix] = entry.split('/');
    const type = isIP(address) === 6 ? 'ipv6' : 'ipv4';
    if (prefix === undefined) list.addAddress(address, type);
    else list.addSubnet(address, Number(prefix), type);
  }
  return list;
}

function isExempt(list: BlockList, address: string): boolean {
  // An IPv4 client on a dual-stack socket shows as ::ffff:a.b.c.d.
  const plain = address.startsWith('::ffff:') ? address.slice(7) : address;
  const type = isIP(plain) === 6 ? 'ipv6' : 'ipv4';
  return isIP(plain) !== 0 && list.check(plain, type);
}
