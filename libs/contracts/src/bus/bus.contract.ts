import type { ErrorBody } from '../errors/error-codes.js';

/** Every bus reply is one of these, JSON-encoded: plain data, no transport framing. */
export type Reply<T> = { ok: true; data: T } | { ok: false; error: ErrorBody };

/** The NATS header (and HTTP header) that carries a request's id from the gateway to every service. */
export const REQUEST_ID_HEADER = 'x-request-id';

/** The HTTP header naming the model that served a request in place of the one it asked for (its `fallback`). */
export const SERVED_BY_HEADER = 'x-cortex-served-by';

/** The NATS header naming the object that holds a body too large for one message (its data is then empty). */
export const PAYLOAD_HEADER = 'cortex-payload';
/** The JetStream object store bucket for request and reply bodies over the server's max_payload. */
export const PAYLOAD_BUCKET = 'cortex-payloads';

/** The JetStream KV buckets cortex keeps state in. */
export const Buckets = {
  /** Stored Responses API responses (translator). */
  responses: 'cortex_responses',
  /** Items of Responses API conversations (translator). */
  conversations: 'cortex_conversations',
  /** Pinned models (router). */
  pins: 'cortex_pins',
  /** Prompt-prefix affinity bindings (router). */
  affinity: 'cortex_affinity',
  /** Model load leases between routers (router). */
  leases: 'cortex_leases',
  /** API keys (hashed) and accounts, written by the admin API and `cortex keys`, watched by every gateway. */
  keys: 'cortex_keys',
  /** Rate-limit state per key and account: request windows and concurrency leases (gateways). */
  limits: 'cortex_limits',
  /** Models added, changed or removed at run time (admin API, `cortex models add|set|remove`), watched by routers and gateways. */
  catalogue: 'cortex_catalogue',
} as const;

/** Answer from each service on the status subject, for `cortex status`. */
export interface ServicePing {
  service: string;
  id: string;
  host: string;
  pid: number;
  uptimeS: number;
  ready: boolean;
  detail?: string;
}

/** Bytes as whole MiB for logs and tables. */
export function mib(bytes: number): string {
  return `${Math.round(bytes / 2 ** 20)} MiB`;
}
