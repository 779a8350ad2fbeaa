import type { KV } from '@nats-io/kv';

interface Waiter {
  target: number;
  done: (caughtUp: boolean) => void;
}

/**
 * How far a KV watch has read, and a bounded wait for it to reach what the bucket holds now. A lookup
 * in a watched view that misses can ask whether the miss is real, or whether the watch is only behind
 * a write made a moment ago through another process.
 *
 * Asking the bucket is one JetStream request (its stream's last sequence). Misses that arrive while
 * one is in flight share the next one, so a flood of misses costs at most two requests at a time.
 */
export class KvCatchUp {
  private seen = 0;
  private readonly waiters = new Set<Waiter>();
  private inFlight: Promise<number> | null = null;
  private queued: Promise<number> | null = null;

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
    return new Promise((resolve) => {
      let settled = false;
      const waiter: Waiter = { target: Number.POSITIVE_INFINITY, done: (caughtUp) => finish(caughtUp) };
      const timer = setTimeout(() => finish(false), withinMs);
      const finish = (caughtUp: boolean): void => {
        if (settled) return;
        settled = true;
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
    if (!this.inFlight) return this.ask();
    this.queued ??= this.inFlight.then(noop, noop).then(() => {
      this.queued = null;
      return this.ask();
    });
    return this.queued;
  }

  private ask(): Promise<number> {
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
