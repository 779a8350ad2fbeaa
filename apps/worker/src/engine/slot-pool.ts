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

  /** Resolves with a slot; rejects with `busy` when the queue is full, or the abort reason. */
  acquire(signal?: AbortSignal): Promise<T> {
    const slot = this.free.pop();
    if (slot !== undefined) {
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
