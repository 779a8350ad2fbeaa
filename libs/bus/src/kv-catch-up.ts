import type { KV } from '@nats-io/kv';

interface Waiter {
  target: number;
  done: (caughtUp: boolean) => void;
}

/** Bucket requests start at least this far apart: a flood of misses asks NATS at most 100 times a second. */
export const CATCH_UP_ASK_INTERVAL_MS = 10;
/** Misses waiting at once beyond this are answered at once (false): a flood holds bounded memory. */
export const CATCH_UP_MAX_WAITING = 10_000;

/**
 * How far a KV watch has read, and a bounded wait for it to reach what the bucket holds now. A lookup
 * in a watched view that misses can ask whether the miss is real, or whether the watch is only behind
 * a write made a moment ago through another process.
 *
 * Asking the bucket is one JetStream request (its stream's last sequence). Misses share requests: one
 * that arrives while a request is in flight, or sooner than `CATCH_UP_ASK_INTERVAL_MS` after the last
 * one began, waits for the next, which every such miss shares.
 */
export class KvCatchUp {
  private seen = 0;
  private readonly waiters = new Set<Waiter>();
  private inFlight: Promise<number> | null = null;
  private queued: Promise<number> | null = null;
  private lastAskAt = Number.NEGATIVE_INFINITY;
  private waiting = 0;

  constructor(private readonly kv: KV) {}

  /** The watch delivered the entry at this revision (the bucket stream's sequence). */
  saw(revision: number): void {
    if (revision <= this.seen) return;
    this.seen = revision;
    for (const waiter of this.waiters) if (waiter.target <= revision) waiter.done(true);
  }

  /**
   * True once the watch has delivered every change the bucket held when this was called; false when
   * that takes longer than `withinMs`, or the bucket cannot be asked.
   */
  caughtUp(withinMs: number): Promise<boolean> {
    if (this.waiting >= CATCH_UP_MAX_WAITING) return Promise.resolve(false);
    this.waiting++;
    return new Promise((resolve) => {
      let settled = false;
      const waiter: Waiter = { target: Number.POSITIVE_INFINITY, done: (caughtUp) => finish(caughtUp) };
      const timer = setTimeout(() => finish(false), withinMs);
      const finish = (caughtUp: boolean): void => {
        if (settled) return;
        settled = true;
        this.waiting--;
        clearTimeout(timer);
        this.waiters.delete(waiter);
        resolve(caughtUp);
      };
      this.lastSequence().then(
        (target) => {
          if (target <= this.seen) return finish(true);
          waiter.target = target;
          if (!settled) this.waiters.add(waiter);
        },
        () => finish(false),
      );
    });
  }

  /** The bucket's last sequence, asked after the call: a request already in flight may predate the write the caller looks for. */
  private lastSequence(): Promise<number> {
    if (this.queued) return this.queued;
    const spacing = this.lastAskAt + CATCH_UP_ASK_INTERVAL_MS - performance.now();
    if (!this.inFlight && spacing <= 0) return this.ask();
    const spaced = new Promise<void>((done) => setTimeout(done, Math.max(0, Math.ceil(spacing))));
    this.queued = Promise.all([this.inFlight?.then(noop, noop), spaced]).then(() => {
      this.queued = null;
      return this.ask();
    });
    return this.queued;
  }

  private ask(): Promise<number> {
    this.lastAskAt = performance.now();
    const asked = this.kv.status().then((status) => status.streamInfo.state.last_seq);
    this.inFlight = asked;
    const clear = (): void => {
      if (this.inFlight === asked) this.inFlight = null;
    };
    asked.then(clear, clear);
    return asked;
  }
}

const noop = (): void => undefined;
