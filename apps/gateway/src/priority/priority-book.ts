import { Injectable } from '@nestjs/common';
import type { RequestPriority } from '@cortex/contracts';
import { TAIL_MS } from '../inference/inference-run.js';
import { BACKGROUND_SETTLE_BOUND_MS } from '../limits/key-admission.js';
import { RequestScoped } from '../request-scoped.js';

/**
 * Each request's tier and account (see priority.decider.ts), by request id: set by the HTTP hook
 * (http/priority.ts) once the key is known, read when a run sends its generate command and when its
 * request-finished event is published. A WebSocket turn (`<connection's request id>.<n>`) has its own
 * entry when its key is stored (set at each turn, see TurnAdmission), and reads its connection's
 * otherwise. Kept in this gateway's memory for the life of the request only: nothing here
 * outlives it, so nothing needs to be shared between gateways.
 */
@Injectable()
export class PriorityBook extends RequestScoped<RequestPriority> {
  /**
   * Sets a request's priority; `ended` (when its response closes) forgets it once its request-finished
   * event, which reads it, can no longer come: a run records it at most TAIL_MS after its response
   * closed (a background run's goes on for long).
   */
  hold(requestId: string, priority: RequestPriority, background: boolean): { ended: () => void } {
    const entry = this.set(requestId, priority);
    return { ended: () => entry.forget(background ? BACKGROUND_SETTLE_BOUND_MS : 2 * TAIL_MS) };
  }

  of(requestId: string): RequestPriority | undefined {
    const exact = this.get(requestId);
    if (exact) return exact;
    const turn = requestId.lastIndexOf('.');
    return turn > 0 ? this.get(requestId.slice(0, turn)) : undefined;
  }
}
