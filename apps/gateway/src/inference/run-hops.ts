import { performance } from 'node:perf_hooks';
import type { GatewayHops } from '@cortex/contracts';

/**
 * A run's time to first byte inside the gateway, hop by hop (see GatewayHops), and the router's share
 * of its placements, for its request-finished event.
 */
export class RunHops {
  /** `writeMs` is set when the first token's frame is written. */
  private readonly hops: GatewayHops = { parseMs: 0, decodeMs: 0, generateMs: 0, firstEventMs: 0, writeMs: -1 };
  private firstEventAt = 0;
  /** The router's round trips, summed over the run's placements; null while every one reused an answer. */
  private routerMs: number | null = null;

  /** The run begins: its request arrived at `arrival` (performance.now()). */
  constructor(arrival: number) {
    this.hops.parseMs = performance.now() - arrival;
  }

  decoded(startedAt: number): void {
    this.hops.decodeMs = performance.now() - startedAt;
  }

  /** A placement asked at `startedAt` came; `routerMs` is the router's round trip, null for a reused answer. */
  placed(startedAt: number, routerMs: number | null): void {
    this.hops.placeMs ??= performance.now() - startedAt;
    if (routerMs !== null) this.routerMs = (this.routerMs ?? 0) + routerMs;
  }

  /** The worker accepted a generate command sent at `sentAt`. */
  accepted(sentAt: number): void {
    this.hops.generateMs = performance.now() - sentAt;
  }

  /** The first token's event came, `acceptedAt` after the command was accepted. */
  firstEvent(acceptedAt: number): void {
    this.firstEventAt = performance.now();
    this.hops.firstEventMs = this.firstEventAt - acceptedAt;
  }

  /** The first token's frame is on the client's socket: the last hop. */
  firstByteWritten(): void {
    if (this.hops.writeMs < 0 && this.firstEventAt) this.hops.writeMs = performance.now() - this.firstEventAt;
  }

  /** The hops of a run whose first byte was written; null otherwise. */
  get written(): GatewayHops | null {
    return this.hops.writeMs < 0 ? null : this.hops;
  }

  get placeMs(): number | null {
    return this.routerMs;
  }
}
