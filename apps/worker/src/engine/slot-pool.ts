import { CortexError } from '@cortex/contracts';
import { FairQueue, FifoQueue, UNRANKED, type QueueTicket, type WaitQueue } from './fair-queue.js';

interface Waiter<T> {
  resolve: (slot: T) => void;
  reject: (error: Error) => void;
  signal: AbortSignal | undefined;
  onAbort: () => void;
  ticket: QueueTicket;
}

/** How waiting requests are ordered: by tier and fairly across accounts (`fair`), or first come first served (`fifo`). */
export type QueueOrder = 'fair' | 'fifo';

/**
 * Hands out a fixed set of slots (context sequences). When all are busy, callers wait in a bounded
 * queue, ordered by `FairQueue` (tier, then accounts by tokens) or first come first served; past the
 * bound they get `busy` at once so the gateway can answer 429 instead of piling up requests the
 * worker cannot serve.
 */
export class SlotPool<T> {
  private readonly free: T[];
  private readonly waiters: WaitQueue<Waiter<T>>;
  /** The ticket each slot in use was acquired with, settled when it is released. */
  private readonly holders = new Map<T, QueueTicket>();

  constructor(
    slots: readonly T[],
    private readonly maxQueue: number,
    order: QueueOrder = 'fair',
  ) {
    this.free = [...slots];
    this.waiters = order === 'fifo' ? new FifoQueue() : new FairQueue();
  }

  get size(): number {
    return this.free.length + this.inUse;
  }

  inUse = 0;

  get queued(): number {
    return this.waiters.size;
  }

  /**
   * Resolves with a slot — among free ones, the one `choose` picks (its index in the free slots, oldest
   * released first: see chooseSlot), else the most recently released; rejects with `busy` when the
   * queue is full, or with the abort reason. `ticket` places the request in the queue (see FairQueue).
   */
  acquire(signal?: AbortSignal, choose?: (free: readonly T[]) => number, ticket: QueueTicket = UNRANKED): Promise<T> {
    if (this.free.length > 0) {
      const at = choose && this.free.length > 1 ? choose(this.free) : this.free.length - 1;
      const [slot] = this.free.splice(at, 1) as [T];
      this.inUse++;
      this.waiters.admitted(ticket);
      this.holders.set(slot, ticket);
      return Promise.resolve(slot);
    }
    if (this.waiters.size >= this.maxQueue) {
      return Promise.reject(
        new CortexError('busy', `all ${this.size} slots are busy and ${this.waiters.size} requests are queued`, {
          retryAfter: 1,
        }),
      );
    }
    return new Promise<T>((resolve, reject) => {
      const waiter: Waiter<T> = {
        resolve,
        reject,
        signal,
        ticket,
        onAbort: () => {
          this.waiters.remove(waiter);
          reject(signal?.reason instanceof Error ? signal.reason : new Error('aborted while queued'));
        },
      };
      signal?.addEventListener('abort', waiter.onAbort, { once: true });
      this.waiters.push(waiter, ticket);
    });
  }

  /**
   * Gives the slot to the next waiter, or back to the free ones. `cost`: the tokens the request that
   * held it really cost (see chargedTokens); its account's charge is corrected before the next is chosen.
   */
  release(slot: T, cost?: number): void {
    const held = this.holders.get(slot);
    this.holders.delete(slot);
    if (held) this.waiters.settle(held, cost ?? held.cost);
    const next = this.waiters.shift();
    if (next) {
      next.signal?.removeEventListener('abort', next.onAbort);
      this.holders.set(slot, next.ticket);
      next.resolve(slot);
      return;
    }
    this.inUse--;
    this.free.push(slot);
  }
}
