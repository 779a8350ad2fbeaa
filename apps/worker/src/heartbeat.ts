import { hostname } from 'node:os';
import type { Logger } from '@nestjs/common';
import { heartbeatSubject, type Heartbeat, type LoadedModel, type MemoryInfo } from '@cortex/contracts';
import type { BusClient } from '@cortex/bus';
import type { Engine } from './engine/index.js';

export type Device = Awaited<ReturnType<Engine['device']>>;

/** How long a goodbye waits for NATS to take it before the stop goes on. */
const GOODBYE_FLUSH_MS = 1_000;

/** What a heartbeat reports, read afresh at each beat. */
export interface HeartbeatSource {
  readonly draining: boolean;
  device(): Promise<Device>;
  memory(device: Device): MemoryInfo;
  loaded(): LoadedModel[];
}

/**
 * The worker's heartbeat on `llm.hb.v1.worker.<id>`: every `intervalMs`, at once on a state change,
 * and soon after a request ends. Routers and metrics know the worker only through it.
 */
export class HeartbeatPublisher {
  private timer: NodeJS.Timeout | null = null;
  private beatSoon: NodeJS.Timeout | null = null;
  private readonly startedAt = Date.now();
  /** Set by goodbye(): no beat may follow it (a beat that was reading the device when it came is dropped). */
  private left = false;

  constructor(
    private readonly bus: BusClient,
    private readonly workerId: string,
    private readonly intervalMs: number,
    private readonly source: HeartbeatSource,
    private readonly logger: Logger,
  ) {}

  start(): void {
    this.timer = setInterval(() => void this.beat(), this.intervalMs);
    void this.beat();
  }

  /** No more periodic or pending beats; `beat()` still sends one when asked. */
  stop(): void {
    if (this.timer) clearInterval(this.timer);
    if (this.beatSoon) clearTimeout(this.beatSoon);
  }

  /**
   * A request ended: tell the routers soon rather than at the next beat, so placement and eviction
   * see the model idle. Requests ending together share one heartbeat.
   */
  soon(): void {
    if (this.beatSoon) return;
    this.beatSoon = setTimeout(() => {
      this.beatSoon = null;
      void this.beat();
    }, 20);
  }

  /**
   * The last beat, once a graceful stop has drained the worker: routers forget it at once, so the fleet
   * is not left impaired by a worker that is not coming back (a pod replaced in a rollout). Flushed,
   * so it leaves before the connection drains; bounded, so a frozen NATS cannot hold the stop.
   */
  async goodbye(): Promise<void> {
    this.stop();
    await this.beat(true);
    if (this.bus.nc.isClosed()) return;
    await Promise.race([
      this.bus.nc.flush().catch(() => undefined),
      new Promise((done) => setTimeout(done, GOODBYE_FLUSH_MS).unref()),
    ]);
  }

  async beat(leaving = false): Promise<void> {
    if (this.bus.nc.isClosed() || this.left) return;
    try {
      const device = await this.source.device();
      // goodbye() came while the device was read: this beat would bring the worker back.
      if (this.left) return;
      if (leaving) this.left = true;
      const beat: Heartbeat = {
        workerId: this.workerId,
        host: hostname(),
        pid: process.pid,
        startedAt: this.startedAt,
        sentAt: Date.now(),
        intervalMs: this.intervalMs,
        draining: this.source.draining,
        ...(leaving && { leaving }),
        device,
        memory: this.source.memory(device),
        models: this.source.loaded(),
      };
      this.bus.publish(heartbeatSubject(this.workerId), beat);
    } catch (error) {
      this.logger.warn(`heartbeat failed: ${(error as Error).message}`);
    }
  }
}
