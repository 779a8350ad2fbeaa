import { hostname } from 'node:os';
import type { Logger } from '@nestjs/common';
import { heartbeatSubject, type Heartbeat, type LoadedModel, type MemoryInfo } from '@cortex/contracts';
import type { BusClient } from '@cortex/bus';
import type { Engine } from './engine/index.js';

export type Device = Awaited<ReturnType<Engine['device']>>;

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

  async beat(): Promise<void> {
    if (this.bus.nc.isClosed()) return;
    try {
      const device = await this.source.device();
      const beat: Heartbeat = {
        workerId: this.workerId,
        host: hostname(),
        pid: process.pid,
        startedAt: this.startedAt,
        sentAt: Date.now(),
        intervalMs: this.intervalMs,
        draining: this.source.draining,
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
