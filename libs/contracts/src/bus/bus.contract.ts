import type { ErrorBody } from '../errors/error-codes.js';

/** Every bus reply is one of these, JSON-encoded: plain data, no transport framing. */
export type Reply<T> = { ok: true; data: T } | { ok: false; error: ErrorBody };

/** The NATS header (and HTTP header) that carries a request's id from the gateway to every service. */
export const REQUEST_ID_HEADER = 'x-request-id';

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
