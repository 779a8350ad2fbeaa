import { Inject, Injectable, Logger, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import type { Subscription } from '@nats-io/transport-node';
import { BusClient, EventPublisher } from '@cortex/bus';
import { CONFIG, type CortexConfig } from '@cortex/config';
import {
  decodeMessage,
  fromWorker,
  Heartbeat,
  Subjects,
  type LoadedModel,
  type WorkerDownReason,
  type WorkerLifecycleEvent,
  type WorkerView,
} from '@cortex/contracts';
import { FleetState, type WorkerState } from './fleet-state.js';

/**
 * The router's fleet: heartbeats in, up/down verdicts out, and the FleetState placement reads
 * (rebuilt from heartbeats alone, so a restarted router loses nothing). A worker that says goodbye
 * (a graceful stop) is forgotten at once; one that falls silent is down, then forgotten after
 * `router.forget_worker_after_ms`: in Kubernetes worker ids are pod names, and every rollout or
 * scale-down would otherwise leave the fleet impaired for good.
 */
@Injectable()
export class FleetRegistry implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('fleet');
  private readonly state = new FleetState();
  private readonly listeners = new Set<(workerId: string) => void>();
  private sub: Subscription | null = null;
  private sweeper: NodeJS.Timeout | null = null;
  private readonly down = new Set<string>();
  private readonly events: EventPublisher;
  private waiters: Array<() => void> = [];

  private readonly forgetAfterMs: number;

  constructor(
    private readonly bus: BusClient,
    @Inject(CONFIG) config: CortexConfig,
  ) {
    this.events = new EventPublisher(bus.nc);
    this.forgetAfterMs = config.router.forgetWorkerAfterMs;
  }

  onModuleInit(): void {
    this.sweeper = setInterval(() => this.markDown(), 500);
    this.sub = this.bus.subscribe(
      Subjects.heartbeatAll,
      // A beat counts only from the worker it describes: another worker's user cannot speak for it.
      (data, subject) => this.accept(fromWorker(subject, decodeMessage(Heartbeat, data, 'heartbeat'))),
      (error) => this.logger.warn(`dropped a heartbeat: ${error.message}`),
    );
  }

  onModuleDestroy(): void {
    this.sub?.unsubscribe();
    if (this.sweeper) clearInterval(this.sweeper);
  }

  /**
   * Announces workers that stopped heartbeating (once each). Every router may; the message ids come
   * from the worker's own timestamps, the same in every router, so JetStream keeps one.
   */
  private markDown(): void {
    const now = Date.now();
    for (const { workerId, beat, silentMs } of this.state.silent(now)) {
      if (this.down.has(workerId)) continue;
      this.down.add(workerId);
      this.logger.warn(`worker ${workerId} is down (no heartbeat for ${silentMs} ms)`);
      this.announce(Subjects.workerDown, workerId, `${workerId}.down.${beat.sentAt}`, 'silent');
      this.notify();
    }
    for (const { workerId, silentMs } of this.state.forgetSilent(now, this.forgetAfterMs)) {
      this.down.delete(workerId);
      this.logger.warn(
        `forgot worker ${workerId}: silent for ${Math.round(silentMs / 1000)} s (router.forget_worker_after_ms)`,
      );
      this.notify();
    }
  }

  /** A worker said goodbye: it is gone from the fleet now, not down once its beats stop. */
  private leave(beat: Heartbeat): void {
    const wasUp = this.state.heartbeating(beat.workerId, Date.now()) && !this.down.has(beat.workerId);
    if (!this.state.forget(beat.workerId)) return;
    this.down.delete(beat.workerId);
    this.logger.log(`worker ${beat.workerId} left (it said goodbye)`);
    // Gateways forget its placements and streams as for a worker that went down; one already down was announced.
    if (wasUp) this.announce(Subjects.workerDown, beat.workerId, `${beat.workerId}.left.${beat.startedAt}`, 'left');
    this.notify();
  }

  private announce(subject: string, workerId: string, id: string, reason?: WorkerDownReason): void {
    const event: WorkerLifecycleEvent = { workerId, at: Date.now(), ...(reason && { reason }) };
    this.events
      .publish(subject, event, id)
      .catch((error: Error) => this.logger.warn(`could not record ${subject}: ${error.message}`));
  }

  /** Resolves at the next change of the fleet view (a heartbeat, a claim, a worker down), or after `maxMs`. */
  changed(maxMs: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(
        () => {
          this.waiters = this.waiters.filter((waiter) => waiter !== wake);
          resolve();
        },
        Math.max(0, maxMs),
      );
      const wake = (): void => {
        clearTimeout(timer);
        resolve();
      };
      this.waiters.push(wake);
    });
  }

  private notify(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const wake of waiters) wake();
  }

  /** Called with a worker id on every heartbeat. */
  onHeartbeat(listener: (workerId: string) => void): void {
    this.listeners.add(listener);
  }

  accept(beat: Heartbeat): void {
    if (beat.leaving) return this.leave(beat);
    const previous = this.state.lastBeat(beat.workerId);
    if (this.state.observe(beat, Date.now())) {
      this.logger.log(`worker ${beat.workerId} is up (${beat.device.kind}, ${beat.host})`);
      this.down.delete(beat.workerId);
      this.announce(Subjects.workerUp, beat.workerId, `${beat.workerId}.up.${beat.startedAt}.${previous?.sentAt ?? 0}`);
    }
    for (const listener of this.listeners) listener(beat.workerId);
    this.notify();
  }

  /** Workers that stopped heartbeating less than `withinMs` ago (and were not draining). */
  silent(withinMs: number): string[] {
    return this.state
      .silent(Date.now())
      .filter(({ beat, silentMs }) => silentMs < withinMs && !beat.draining)
      .map(({ workerId }) => workerId);
  }

  /**
   * Workers up, or silent for less than `graceMs` (perhaps only stalled), claims applied: for commands
   * that may wait for a stalled worker and fail cleanly on a dead one.
   */
  reachable(graceMs: number): WorkerState[] {
    return this.state
      .all(Date.now())
      .filter(({ beat, up, silentMs }) => !beat.draining && (up || silentMs < graceMs))
      .map(({ state }) => state);
  }

  /** Workers that may take new requests, with this router's claims applied. */
  available(): WorkerState[] {
    return this.state.available(Date.now());
  }

  /** Whether a worker still heartbeats, draining or not: alive, whatever it may take. */
  heartbeating(workerId: string): boolean {
    return this.state.heartbeating(workerId, Date.now());
  }

  worker(workerId: string): WorkerState | undefined {
    return this.available().find((w) => w.workerId === workerId);
  }

  /** Claims a model state the router caused, before the worker's next heartbeat reports it. */
  noteModel(workerId: string, model: LoadedModel): void {
    this.state.claimModel(workerId, model, model.id, Date.now());
    this.notify();
  }

  /** The router unloaded a model; forget it until a heartbeat says otherwise. */
  dropModel(workerId: string, model: string): void {
    this.state.claimModel(workerId, null, model, Date.now());
    this.notify();
  }

  /** A request was just placed on this model: it is the most recently used now. */
  touch(workerId: string, model: string): void {
    this.state.touch(workerId, model, Date.now());
  }

  claimClosing(workerId: string, model: string, until: number): void {
    this.state.claimClosing(workerId, model, until);
  }

  releaseClosing(workerId: string, model: string): void {
    this.state.releaseClosing(workerId, model);
  }

  views(): WorkerView[] {
    return this.state.all(Date.now()).map(({ state, beat, up, silentMs }) => ({
      workerId: beat.workerId,
      host: beat.host,
      pid: beat.pid,
      up,
      lastSeenMs: silentMs,
      ...(!up && { forgetInMs: Math.max(0, this.forgetAfterMs - silentMs) }),
      draining: beat.draining,
      device: beat.device,
      memory: { ...beat.memory, freeBytes: state.freeBytes },
      models: state.models.map(({ closingUntil: _, ...model }) => model),
    }));
  }
}
