import { Injectable } from '@nestjs/common';

/** Why the gateway turned a client away before any request of it ran. */
export const REFUSAL_REASONS = [
  'too_many_connections',
  'too_many_websockets',
  'too_many_uploads',
  'upload_bytes',
  'request_timeout',
  'body_too_deep',
  'ws_message_timeout',
  'ws_rate',
] as const;
export type RefusalReason = (typeof REFUSAL_REASONS)[number];

/**
 * What this gateway refused, counted since it started: the bounds on what a client can make it hold
 * (connections, uploads, slow or deep bodies, WebSocket messages). The counts travel in the gateway's
 * bus status event, and the metrics service turns them into `cortex_gateway_refusals_total{reason}`.
 */
@Injectable()
export class RefusalCounter {
  private readonly counts = new Map<RefusalReason, number>();

  count(reason: RefusalReason): void {
    this.counts.set(reason, (this.counts.get(reason) ?? 0) + 1);
  }

  /** The counts so far, cumulative. */
  snapshot(): Record<string, number> {
    return Object.fromEntries(this.counts);
  }
}
