import { Injectable, Logger, type OnApplicationShutdown } from '@nestjs/common';

/**
 * Pauses between the tries of a write NATS did not take (unreachable, restarting, its JetStream still
 * recovering its streams): about 90 s in all, inside JetStream's 2-minute duplicate window (a usage
 * record tried again is stored once) and the budgets' memory of settled reservations (SETTLED_MEMORY_MS).
 */
export const FINAL_WRITE_RETRIES_MS = [1_000, 2_000, 4_000, 8_000, 15_000, 30_000, 30_000];
/** When the gateway stops, how long the writes still owed may take: inside the margin `cortex serve` gives after drain_timeout_ms. */
export const SHUTDOWN_WRITES_MS = 4_000;
/** At shutdown a write is tried again at once, but no faster than this. */
const SHUTDOWN_PAUSE_MS = 250;

const pause = (ms: number): Promise<void> => new Promise((done) => setTimeout(done, ms).unref());

/**
 * What a request's end owes the fleet — its budgets settled with what it used, its usage record
 * stored — goes through here: tried again while NATS does not take it, and waited for when the gateway
 * stops (SIGTERM), so a request that ended just before is charged and recorded rather than lost with
 * the process. Every write must be safe to repeat (a usage record's message id, a settlement's id).
 */
@Injectable()
export class FinalWrites implements OnApplicationShutdown {
  private readonly logger = new Logger('final-writes');
  /** Work kept for shutdown to wait for: a request's end up to its last write. */
  private readonly pending = new Set<Promise<unknown>>();
  private stop: () => void = () => undefined;
  /** Resolves when the gateway begins to stop. */
  private readonly stopping = new Promise<void>((done) => (this.stop = done));
  /** Past the shutdown's wait: a write that fails is not tried again. */
  private closed = false;

  /** Keeps `work` until it ends, for the shutdown to wait for; its outcome is the caller's. */
  track<T>(work: Promise<T>): Promise<T> {
    const kept = work.then(
      () => undefined,
      () => undefined,
    );
    this.pending.add(kept);
    void kept.then(() => this.pending.delete(kept));
    return work;
  }

  /**
   * Makes `write` until it succeeds, pausing FINAL_WRITE_RETRIES_MS between tries (at once once the
   * gateway stops); rejects with the last error when they run out or the gateway has stopped.
   */
  async write<T>(write: () => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await write();
      } catch (error) {
        const wait = FINAL_WRITE_RETRIES_MS[attempt];
        if (wait === undefined || this.closed) throw error;
        await Promise.race([pause(wait), this.stopping.then(() => pause(SHUTDOWN_PAUSE_MS))]);
      }
    }
  }

  /** The gateway stops, its HTTP server closed: the writes still owed get SHUTDOWN_WRITES_MS. */
  async onApplicationShutdown(): Promise<void> {
    this.stop();
    const deadline = Date.now() + SHUTDOWN_WRITES_MS;
    // Work tracked while waiting (a request's end that came during the wait) is waited for too.
    while (this.pending.size > 0 && Date.now() < deadline)
      await Promise.race([Promise.all(this.pending), pause(deadline - Date.now())]);
    this.closed = true;
    if (this.pending.size > 0)
      this.logger.warn(
        `${this.pending.size} request ends were not written within ${SHUTDOWN_WRITES_MS / 1000} s of stopping ` +
          '(NATS unreachable): their usage records and budget settlements are lost, and the reservations they ' +
          'held expire on their own',
      );
  }
}
