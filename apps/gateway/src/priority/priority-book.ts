import { Injectable } from '@nestjs/common';
import type { RequestPriority } from '@cortex/contracts';

/**
 * Each request's tier and account (see priority.decider.ts), by request id: set by the HTTP hook
 * (http/priority.ts) once the key is known, read when a run sends its generate command and when its
 * request-finished event is published. A WebSocket turn (`<connection's request id>.<n>`) reads its
 * connection's entry. Kept in this gateway's memory for the life of the request only: nothing here
 * outlives it, so nothing needs to be shared between gateways.
 */
@Injectable()
export class PriorityBook {
  private readonly entries = new Map<string, RequestPriority>();

  /** `requestId` runs at `priority`; the returned `forget` drops it `afterMs` later (a background run reads it after its response). */
  set(requestId: string, priority: RequestPriority): { forget: (afterMs: number) => void } {
    this.entries.set(requestId, priority);
    return {
      forget: (afterMs) => {
        setTimeout(() => {
          if (this.entries.get(requestId) === priority) this.entries.delete(requestId);
        }, afterMs).unref();
      },
    };
  }

  of(requestId: string): RequestPriority | undefined {
    const exact = this.entries.get(requestId);
    if (exact) return exact;
    const turn = requestId.lastIndexOf('.');
    return turn > 0 ? this.entries.get(requestId.slice(0, turn)) : undefined;
  }

  get size(): number {
    return this.entries.size;
  }
}
