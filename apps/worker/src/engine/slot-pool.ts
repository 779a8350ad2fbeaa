import { CortexError } from '@cortex/contracts';

interface Waiter<T> {
  resolve: (slot: T) => void;
  reject: (error: Error) => void;
  signal: AbortSignal | undefined;
  onAbort: () => void;
}

/**
 * Hands out a fixed set of slots (context sequences) first come, first served. When all are busy,
 * callers wait in a bounded queue; past the bound they get `busy` at once so the gateway can answer
 * 429 instead of piling up requests the worker cannot serve.
 */
export class SlotPool<T> {
  private readonly free: T[];
  private readonly waiters: Waiter<T>[] = [];

  constructor(
    slots: readonly T[],
    private readonly maxQueue: number,
  ) {
    this.free = [...slots];
  }

  get size(): number {
    return this.free.length + this.inUse;
  }

  inUse = 0;

  get queued(): number {
    return this.waiters.length;
  }

  /**
   * Resolves with a slot — among free ones, the one `preference` scores highest (e.g. the sequence
   * sharing the longest prompt prefix), else the most recently released; rejects with `busy` when the
   * queue is full, or with the abort reason.
   */
  acquire(signal?: AbortSignal, preference?: (slot: T) => number): Promise<T> {
    if (this.free.length > 0) {
      let at = this.free.length - 1;
      if (preference && this.free.length > 1) {
        let best = preference(this.free[at] as T);
        for (let i = at - 1; i >= 0; i--) {
          const score = preference(this.free[i] as T);
          if (score > best) [best, at] = [score, i];
        }
      }
      const [slot] = this.free.splice(at, 1) as [T];
      this.inUse++;
      return Promise.resolve(slot);
    }
    if (this.waiters.length >= this.maxQueue) {
      return Promise.reject(
        new CortexError('busy', `all ${this.size} slots are busy and ${this.waiters.length} requests are queued`, {
          retryAfter: 1,
        }),
      );
    }
    return new Promise<T>((resolve, reject) => {
      const waiter: Waiter<T> = {
        resolve,
        reject,
        signal,
        onAbort: () => {
          const at = this.waiters.indexOf(waiter);
          if (at !== -1) this.waiters.splice(at, 1);
          reject(signal?.reason instanceof Error ? signal.reason : new Error('aborted while queued'));
        },
      };
      signal?.addEventListener('abort', waiter.onAbort, { once: true });
      this.waiters.push(waiter);
    });
  }

  release(slot: T): void {
    const next = this.waiters.shift();
    if (next) {
      next.signal?.removeEventListener('abort', next.onAbort);
      next.resolve(slot);
      return;
    }
    this.inUse--;
    this.free.push(slot);
  }
}
