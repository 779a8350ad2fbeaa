import type { Logger } from '@nestjs/common';
import { BusClient, StreamReader } from '@cortex/bus';
import { CortexError, Subjects, WATCH_INTERVAL_MS, workerSubject } from '@cortex/contracts';
import type { WorkerEvents } from './worker-events.js';

/** How long a worker declared down has to show it still holds its subjects ("no responders" comes at once). */
const DOWN_PROBE_MS = 1_000;

/**
 * The streams this gateway is reading, by run id: told to their workers every few seconds (watch
 * messages) so a worker can drop the runs nobody reads any more, and ended when their worker is
 * declared down.
 */
export class StreamWatch {
  private readonly streams = new Map<string, { workerId: string; reader: StreamReader }>();
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly bus: BusClient,
    private readonly logger: Pick<Logger, 'warn'>,
    workers: WorkerEvents,
  ) {
    this.timer = setInterval(() => this.send(), WATCH_INTERVAL_MS);
    // A worker down: the streams read from it end (the placement client forgets it on its own).
    workers.onChange((change) => {
      if (change.type === 'down') void this.endStreamsOf(change.workerId);
    });
  }

  /** A stream now read from `workerId`. */
  watch(runId: string, workerId: string, reader: StreamReader): void {
    this.streams.set(runId, { workerId, reader });
  }

  unwatch(runId: string): void {
    this.streams.delete(runId);
  }

  close(): void {
    clearInterval(this.timer);
  }

  /**
   * A router declared this worker down (missed heartbeats). A killed worker's subjects have no
   * responders at once: then its streams will never go on, and each ends now with `worker_lost`
   * instead of at the idle timeout (before the first token that error places the request again; after
   * it the client gets the dialect's error event). A worker that only stalled (its event loop busy for
   * seconds on a loaded host) still holds its subscriptions and keeps its streams; the stream idle
   * timeout still ends them if it never comes back.
   */
  private async endStreamsOf(workerId: string): Promise<void> {
    const runIds = [...this.streams].filter(([, stream]) => stream.workerId === workerId).map(([runId]) => runId);
    if (runIds.length === 0) return;
    // `watch` is what this gateway sends the worker anyway; it has no reply, so only "no responders" is quick.
    const gone = await this.bus.unreachable(workerSubject(Subjects.workerWatch, workerId), { runIds }, DOWN_PROBE_MS);
    if (!gone) {
      this.logger.warn(
        `worker ${workerId} was declared down but still holds its subjects: ` +
          `its ${runIds.length} stream(s) go on, bounded by the idle timeout`,
      );
      return;
    }
    const why = `worker ${workerId} is down (its heartbeats stopped and nothing serves its subjects)`;
    for (const runId of runIds) this.streams.get(runId)?.reader.fail(new CortexError('worker_lost', why));
  }

  private send(): void {
    const byWorker = new Map<string, string[]>();
    for (const [runId, { workerId }] of this.streams) {
      const runs = byWorker.get(workerId);
      if (runs) runs.push(runId);
      else byWorker.set(workerId, [runId]);
    }
    for (const [workerId, runIds] of byWorker)
      this.bus.publish(workerSubject(Subjects.workerWatch, workerId), { runIds });
  }
}
