import { Injectable, Logger, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import type { Subscription } from '@nats-io/transport-node';
import { BusClient } from '@cortex/bus';
import { decodeMessage, Heartbeat, Subjects, type LoadedModel, type WorkerView } from '@cortex/contracts';

/** A worker that missed this many heartbeats is down until it beats again. */
const MISSED_BEATS_DOWN = 3;

interface WorkerEntry {
  beat: Heartbeat;
  lastSeen: number;
}

/** The fleet as the router sees it, rebuilt from heartbeats alone (a restarted router loses nothing). */
@Injectable()
export class FleetRegistry implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('fleet');
  private readonly workers = new Map<string, WorkerEntry>();
  private readonly listeners = new Set<(workerId: string) => void>();
  private sub: Subscription | null = null;

  constructor(private readonly bus: BusClient) {}

  onModuleInit(): void {
    this.sub = this.bus.subscribe(
      Subjects.heartbeatAll,
      (data) => this.accept(decodeMessage(Heartbeat, data, 'heartbeat')),
      (error) => this.logger.warn(`dropped a heartbeat: ${error.message}`),
    );
  }

  onModuleDestroy(): void {
    this.sub?.unsubscribe();
  }

  /** Called with a worker id on every heartbeat. */
  onHeartbeat(listener: (workerId: string) => void): void {
    this.listeners.add(listener);
  }

  accept(beat: Heartbeat): void {
    const known = this.workers.get(beat.workerId);
    if (!known || !this.isUp(known)) this.logger.log(`worker ${beat.workerId} is up (${beat.device.kind}, ${beat.host})`);
    // Last use only moves forward: a heartbeat built before a request this router just placed must
    // not make that model look colder than it is (LRU would evict the model in use).
    for (const model of beat.models) {
      const seen = known?.beat.models.find((m) => m.id === model.id)?.lastUsedAt ?? 0;
      model.lastUsedAt = Math.max(model.lastUsedAt, seen);
    }
    this.workers.set(beat.workerId, { beat, lastSeen: Date.now() });
    for (const listener of this.listeners) listener(beat.workerId);
  }

  /** Workers that may take new requests. */
  available(): Heartbeat[] {
    return [...this.workers.values()].filter((w) => this.isUp(w) && !w.beat.draining).map((w) => w.beat);
  }

  /** Records a state change the router caused before the worker's next heartbeat reports it. */
  noteModel(workerId: string, model: LoadedModel): void {
    const entry = this.workers.get(workerId);
    if (!entry) return;
    entry.beat.models = [...entry.beat.models.filter((m) => m.id !== model.id), model];
  }

  /** A request was just placed on this model: it is the most recently used now, before the next heartbeat says so. */
  touch(workerId: string, model: string): void {
    const entry = this.workers.get(workerId)?.beat.models.find((m) => m.id === model);
    if (entry) entry.lastUsedAt = Date.now();
  }

  /** The router unloaded a model; forget it until a heartbeat says otherwise. */
  dropModel(workerId: string, model: string): void {
    const entry = this.workers.get(workerId);
    if (entry) entry.beat.models = entry.beat.models.filter((m) => m.id !== model);
  }

  views(): WorkerView[] {
    const now = Date.now();
    return [...this.workers.values()].map(({ beat, lastSeen }) => ({
      workerId: beat.workerId,
      host: beat.host,
      pid: beat.pid,
      up: this.isUp({ beat, lastSeen }),
      lastSeenMs: now - lastSeen,
      draining: beat.draining,
      device: beat.device,
      memory: beat.memory,
      models: beat.models,
    }));
  }

  private isUp(entry: WorkerEntry): boolean {
    return Date.now() - entry.lastSeen <= entry.beat.intervalMs * MISSED_BEATS_DOWN;
  }
}
