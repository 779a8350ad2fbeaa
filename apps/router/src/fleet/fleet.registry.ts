import { Injectable, Logger, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import type { Subscription } from '@nats-io/transport-node';
import { BusClient, EventPublisher } from '@cortex/bus';
import {
  decodeMessage,
  fromWorker,
  Heartbeat,
  Subjects,
  type LoadedModel,
  type WorkerLifecycleEvent,
  type WorkerView,
} from '@cortex/contracts';
import { FleetState, type WorkerState } from './fleet-state.js';

/**
 * The router's fleet: heartbeats in, up/down verdicts out, and the FleetState placement reads
 * (rebuilt from heartbeats alone, so a restarted router loses nothing).
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

  constructor(private readonly bus: BusClient) {
    this.events = new EventPublisher(bus.nc);
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
    for (const { workerId, beat, silentMs } of this.state.silent(Date.now())) {
      if (this.down.has(workerId)) continue;
      this.down.add(workerId);
      this.logger.warn(`worker ${workerId} is down (no heartbeat for ${silentMs} ms)`);
      this.announce(Subjects.workerDown, workerId, `${workerId}.down.${beat.sentAt}`);
      this.notify();
    }
  }

  private announce(subject: string, workerId: string, id: string): void {
    const event: WorkerLifecycleEvent = { workerId, at: Date.now() };
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
      draining: beat.draining,
      device: beat.device,
      memory: { ...beat.memory, freeBytes: state.freeBytes },
      models: state.models.map(({ closingUntil: _, ...model }) => model),
    }));
  }
}
