import { Injectable, Logger, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import type { Subscription } from '@nats-io/transport-node';
import { BusClient, EventPublisher } from '@cortex/bus';
import { decodeMessage, Heartbeat, heartbeatFresh, Subjects, type LoadedModel, type WorkerLifecycleEvent, type WorkerView } from '@cortex/contracts';

/** How long the router trusts its own notes about a worker's models over its heartbeats. */
const NOTE_MS = 1_500;

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
  private sweeper: NodeJS.Timeout | null = null;
  private readonly down = new Set<string>();
  private readonly events: EventPublisher;

  constructor(private readonly bus: BusClient) {
    this.events = new EventPublisher(bus.nc);
  }

  onModuleInit(): void {
    this.sweeper = setInterval(() => this.markDown(), 500);
    this.sub = this.bus.subscribe(
      Subjects.heartbeatAll,
      (data) => this.accept(decodeMessage(Heartbeat, data, 'heartbeat')),
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
    for (const [workerId, entry] of this.workers) {
      if (this.isUp(entry) || this.down.has(workerId)) continue;
      this.down.add(workerId);
      this.logger.warn(`worker ${workerId} is down (no heartbeat for ${Date.now() - entry.lastSeen} ms)`);
      this.announce(Subjects.workerDown, workerId, `${workerId}.down.${entry.beat.sentAt}`);
    }
  }

  private announce(subject: string, workerId: string, id: string): void {
    const event: WorkerLifecycleEvent = { workerId, at: Date.now() };
    this.events.publish(subject, event, id).catch((error: Error) => this.logger.warn(`could not record ${subject}: ${error.message}`));
  }

  private waiters: Array<() => void> = [];

  /** Resolves at the next change of the fleet view (a heartbeat, or a change this router noted), or after `maxMs`. */
  changed(maxMs: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((waiter) => waiter !== wake);
        resolve();
      }, Math.max(0, maxMs));
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
    const known = this.workers.get(beat.workerId);
    if (!known || !this.isUp(known)) {
      this.logger.log(`worker ${beat.workerId} is up (${beat.device.kind}, ${beat.host})`);
      this.down.delete(beat.workerId);
      this.announce(Subjects.workerUp, beat.workerId, `${beat.workerId}.up.${beat.startedAt}.${known?.beat.sentAt ?? 0}`);
    }
    // Last use only moves forward: a heartbeat built before a request this router just placed must
    // not make that model look colder than it is (LRU would evict the model in use).
    for (const model of beat.models) {
      const seen = known?.beat.models.find((m) => m.id === model.id)?.lastUsedAt ?? 0;
      model.lastUsedAt = Math.max(model.lastUsedAt, seen);
    }
    this.applyNotes(beat);
    this.workers.set(beat.workerId, { beat, lastSeen: Date.now() });
    for (const listener of this.listeners) listener(beat.workerId);
    this.notify();
  }

  /**
   * Changes this router made itself (a load finished, a model dropped) win over heartbeats for a short
   * while: a heartbeat built just before the change may arrive just after it.
   */
  private applyNotes(beat: Heartbeat): void {
    const notes = this.notes.get(beat.workerId);
    if (!notes) return;
    const now = Date.now();
    for (const [id, note] of notes) {
      if (now - note.at > NOTE_MS || !applyNote(beat, id, note.model)) notes.delete(id);
    }
  }

  private readonly notes = new Map<string, Map<string, { model: LoadedModel | null; at: number }>>();

  /** Records a change and applies it to the current view at once, as the next heartbeats will get it. */
  private note(workerId: string, id: string, model: LoadedModel | null): void {
    let notes = this.notes.get(workerId);
    if (!notes) this.notes.set(workerId, (notes = new Map()));
    notes.set(id, { model, at: Date.now() });
    const entry = this.workers.get(workerId);
    if (entry && !applyNote(entry.beat, id, model)) notes.delete(id);
    this.notify();
  }

  /** Workers that may take new requests. */
  available(): Heartbeat[] {
    return [...this.workers.values()].filter((w) => this.isUp(w) && !w.beat.draining).map((w) => w.beat);
  }

  /** Records a state change the router caused before the worker's next heartbeat reports it. */
  noteModel(workerId: string, model: LoadedModel): void {
    this.note(workerId, model.id, model);
  }

  /** A request was just placed on this model: it is the most recently used now, before the next heartbeat says so. */
  touch(workerId: string, model: string): void {
    const entry = this.workers.get(workerId)?.beat.models.find((m) => m.id === model);
    if (entry) entry.lastUsedAt = Date.now();
  }

  /** The router unloaded a model; forget it until a heartbeat says otherwise. */
  dropModel(workerId: string, model: string): void {
    this.note(workerId, model, null);
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
    return heartbeatFresh(entry.beat.intervalMs, Date.now() - entry.lastSeen);
  }
}

/**
 * Puts a model the router noted (null: dropped) into a heartbeat's view. Returns false when the
 * heartbeat already shows the model ready, which says more (in-flight, capabilities) than the note.
 */
function applyNote(beat: Heartbeat, id: string, model: LoadedModel | null): boolean {
  const reported = beat.models.find((m) => m.id === id);
  if (model && reported?.state === 'ready') return false;
  beat.models = beat.models.filter((m) => m.id !== id);
  if (model) {
    // A load the worker has not started (or not sized) yet is not in its memory figures.
    if (!reported?.sizeBytes) beat.memory.freeBytes = Math.max(0, beat.memory.freeBytes - (model.sizeBytes ?? 0));
    beat.models.push(model);
  }
  return true;
}
