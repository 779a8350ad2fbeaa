import type { Subscription } from '@nats-io/transport-node';
import type { Logger } from '@nestjs/common';
import type { BusClient } from '@cortex/bus';
import { decodeWorkerLifecycle, Subjects } from '@cortex/contracts';

/**
 * The routers' worker-up and worker-down events, as the gateway uses them: a down ends the streams
 * read from that worker (`onDown`), an up wakes requests waiting for a first worker.
 */
export class WorkerEvents {
  /** Worker-up events seen so far; a waiting request compares against the count it saw before asking. */
  ups = 0;
  private readonly waiters = new Set<() => void>();
  private readonly subs: Subscription[];

  constructor(bus: BusClient, logger: Pick<Logger, 'warn'>, onDown: (workerId: string) => void) {
    this.subs = [
      bus.subscribe(
        Subjects.workerDown,
        (data) => onDown(decodeWorkerLifecycle(data).workerId),
        (error) => logger.warn(`skipped a worker-down event: ${error.message}`),
      ),
      bus.subscribe(Subjects.workerUp, () => {
        this.ups++;
        for (const wake of this.waiters) wake();
      }),
    ];
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
