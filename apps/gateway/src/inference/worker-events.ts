import type { Subscription } from '@nats-io/transport-node';
import type { Logger } from '@nestjs/common';
import type { BusClient } from '@cortex/bus';
import {
  decodeLoadResult,
  decodeUnloadResult,
  decodeWorkerLifecycle,
  everyWorker,
  fromWorker,
  Subjects,
} from '@cortex/contracts';

/** A change in the fleet that the gateway acts on. */
export type FleetChange =
  /** A router declared this worker down. */
  | { type: 'down'; workerId: string }
  /** A worker finished loading this model, or unloaded it: which workers can serve it changed. */
  | { type: 'model'; model: string };

/**
 * The fleet's events, as the gateway uses them: a worker down ends the streams read from that worker,
 * a worker up wakes requests waiting for a first worker, a model loaded or unloaded anywhere ends the
 * reuse of placements for that model.
 */
export class WorkerEvents {
  /** Worker-up events seen so far; a waiting request compares against the count it saw before asking. */
  ups = 0;
  private readonly waiters = new Set<() => void>();
  private readonly listeners = new Set<(change: FleetChange) => void>();
  private readonly subs: Subscription[];

  constructor(bus: BusClient, logger: Pick<Logger, 'warn'>) {
    const tell = (change: FleetChange): void => {
      for (const listener of this.listeners) listener(change);
    };
    this.subs = [
      bus.subscribe(
        Subjects.workerDown,
        (data) => tell({ type: 'down', workerId: decodeWorkerLifecycle(data).workerId }),
        (error) => logger.warn(`skipped a worker-down event: ${error.message}`),
      ),
      bus.subscribe(
        everyWorker(Subjects.modelLoaded),
        (data, subject) => tell({ type: 'model', model: fromWorker(subject, decodeLoadResult(data)).model }),
        (error) => logger.warn(`skipped a model-loaded event: ${error.message}`),
      ),
      bus.subscribe(
        everyWorker(Subjects.modelUnloaded),
        (data, subject) => tell({ type: 'model', model: fromWorker(subject, decodeUnloadResult(data)).model }),
        (error) => logger.warn(`skipped a model-unloaded event: ${error.message}`),
      ),
      bus.subscribe(Subjects.workerUp, () => {
        this.ups++;
        for (const wake of this.waiters) wake();
      }),
    ];
  }

  /** `listener` hears each change (each subscriber on its own: the placement client, the streams' owner) until the returned stop. */
  onChange(listener: (change: FleetChange) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Whether a worker-up event came after the `seen`-th, waiting up to `maxMs` (or until `signal`) for one. */
  async upAfter(seen: number, maxMs: number, signal: AbortSignal): Promise<boolean> {
    if (this.ups > seen) return true;
    if (maxMs <= 0 || signal.aborted) return false;
    let wake = (): void => undefined;
    let timer: NodeJS.Timeout | undefined;
    try {
      await new Promise<void>((resolve) => {
        wake = resolve;
        timer = setTimeout(resolve, maxMs);
        signal.addEventListener('abort', wake, { once: true });
        this.waiters.add(wake);
      });
    } finally {
      clearTimeout(timer);
      signal.removeEventListener('abort', wake);
      this.waiters.delete(wake);
    }
    return this.ups > seen;
  }

  close(): void {
    for (const sub of this.subs) sub.unsubscribe();
  }
}
