import { randomBytes } from 'node:crypto';
import type { Subscription } from '@nats-io/transport-node';
import { readFleetHealth, type BusClient } from '@cortex/bus';
import {
  fleetHealth,
  decodeGatewayRuns,
  decodeLoadFailed,
  decodeLoadProgress,
  decodeLoadResult,
  decodeRequestFinished,
  decodeStreamEvent,
  decodeUnloadResult,
  decodeWorkerLifecycle,
  fromWorker,
  isObject,
  streamRunId,
  Subjects,
  workerEventOf,
  type FleetHealth,
  type FleetView,
  type PendingRun,
  type RequestFinishedEvent,
} from '@cortex/contracts';
import { EventRing, LiveRuns, LoadBoard, type FeedEvent, type LiveView, type LoadView } from './feed-state.js';
import { readRecentEvents } from './event-history.js';

/** A load, unload, failure or worker coming and going, for the console's timeline. */
export interface TimelineEntry {
  at: number;
  kind: 'loaded' | 'unloaded' | 'load_failed' | 'worker_up' | 'worker_down';
  workerId: string;
  model: string | null;
  detail: string;
}

export interface ConsoleSnapshot {
  /** What the header shows after the product name: `gateway.console_title` without a leading product name (see consoleHeading). */
  title: string;
  at: number;
  fleet: FleetView | null;
  fleetError: string | null;
  /** The fleet's verdict, as GET /health gives it; null before the first reading. */
  health: FleetHealth | null;
  loads: LoadView[];
  live: LiveView[];
  activity: RequestFinishedEvent[];
  /** Where activity comes from: the events stream (survives restarts), or only what this feed heard. */
  activitySource: 'events-stream' | 'feed';
  activityNote: string | null;
  timeline: TimelineEntry[];
}

export interface FeedOptions {
  title: string;
  /** How often the fleet view is asked of a router while someone watches. */
  fleetIntervalMs: number;
  /** How often in-flight rows are sent when they changed. */
  liveIntervalMs: number;
}

const KEEP_ACTIVITY = 200;
/** Gathering gateways' answers ends once none came for this long. */
const RUNS_STALL_MS = 100;
const KEEP_TIMELINE = 100;
const RING = 512;

/**
 * The console's one live feed while at least one page watches: it subscribes to the fleet's facts
 * (token streams, load progress, model and request events), asks a router for the fleet view every
 * `fleetIntervalMs`, and turns changes into numbered feed events. `stop` drops every subscription
 * and timer: when nobody watches, the console costs the gateway nothing.
 */
export class ConsoleFeed {
  readonly epoch = randomBytes(4).toString('hex');
  private readonly ring = new EventRing(RING);
  private readonly live = new LiveRuns();
  private readonly loads = new LoadBoard();
  private readonly subs: Subscription[] = [];
  private readonly timers: NodeJS.Timeout[] = [];
  private fleet: FleetView | null = null;
  private fleetKey = '';
  private fleetError: string | null = 'not asked yet';
  private health: FleetHealth | null = null;
  private healthKey = '';
  private fleetAsking = false;
  private runsAsking = false;
  private activity: RequestFinishedEvent[] = [];
  private activitySource: ConsoleSnapshot['activitySource'] = 'feed';
  private activityNote: string | null = null;
  private timeline: TimelineEntry[] = [];
  private stopped = false;
  readonly ready: Promise<void>;

  constructor(
    private readonly bus: BusClient,
    private readonly options: FeedOptions,
    private readonly emit: (event: FeedEvent) => void,
    private readonly warn: (message: string) => void,
  ) {
    const onBad = (error: Error): void => this.warn(`console feed skipped a message: ${error.message}`);
    const seen = new Set<string>();
    this.subs.push(
      bus.subscribe(
        Subjects.streamsAll,
        (data, subject) => {
          const runId = streamRunId(subject);
          if (runId) this.live.apply(runId, decodeStreamEvent(data), Date.now());
        },
        onBad,
      ),
      bus.subscribe(
        Subjects.modelProgressed,
        (data) => this.publish('load', this.loads.apply(decodeLoadProgress(data), Date.now())),
        onBad,
      ),
      bus.subscribe(
        Subjects.eventsAll,
        (data, subject) => {
          if (subject !== Subjects.requestFinished) return this.lifecycle(subject, data, Date.now(), true);
          const event = decodeRequestFinished(data);
          // JetStream may deliver a re-published event twice on core NATS; show each request once.
          const key = `${event.requestId}/${event.finishedAt}`;
          if (seen.has(key)) return;
          if (seen.size >= KEEP_ACTIVITY * 4) seen.clear();
          seen.add(key);
          this.addActivity(event);
          this.publish('finished', event);
        },
        onBad,
      ),
    );
    this.timers.push(
      setInterval(() => {
        void this.askFleet();
        void this.askRuns();
      }, options.fleetIntervalMs),
      setInterval(() => this.tick(), options.liveIntervalMs),
    );
    this.ready = Promise.all([this.askFleet(), this.loadHistory(), this.askRuns()]).then(() => undefined);
  }

  snapshot(): ConsoleSnapshot {
    const now = Date.now();
    return {
      title: this.options.title,
      at: now,
      fleet: this.fleet,
      fleetError: this.fleetError,
      health: this.health,
      loads: this.loads.view(),
      live: this.live.view(now),
      activity: this.activity,
      activitySource: this.activitySource,
      activityNote: this.activityNote,
      timeline: this.timeline,
    };
  }

  get nextSeq(): number {
    return this.ring.nextSeq;
  }

  get oldestSeq(): number {
    return this.ring.oldestSeq;
  }

  after(seq: number): FeedEvent[] {
    return this.ring.after(seq);
  }

  /** Ask for the fleet view again now (after a change made from the console). */
  refresh(): void {
    void this.askFleet();
  }

  stop(): void {
    this.stopped = true;
    for (const sub of this.subs) sub.unsubscribe();
    for (const timer of this.timers) clearInterval(timer);
  }

  private publish(event: string, payload: unknown): void {
    if (this.stopped) return;
    this.emit(this.ring.push(event, JSON.stringify(payload)));
  }

  private tick(): void {
    const now = Date.now();
    this.live.sweep(now, 30_000);
    if (this.loads.sweep(now, 60_000)) this.publish('loads', this.loads.view());
    const rows = this.live.take(now);
    if (rows) this.publish('live', { at: now, rows });
  }

  private async askFleet(): Promise<void> {
    if (this.fleetAsking || this.stopped) return;
    this.fleetAsking = true;
    try {
      // One reading for the fleet view and the verdict, so the two never disagree.
      const reading = await readFleetHealth(this.bus.nc, Math.max(1_000, this.options.fleetIntervalMs));
      const health = fleetHealth(reading);
      const healthKey = JSON.stringify(health);
      if (healthKey !== this.healthKey) {
        this.healthKey = healthKey;
        this.publish('health', health);
      }
      this.health = health;
      const fleet = reading.fleet;
      if (!fleet) throw new Error(reading.fleetError ?? (reading.bus ? 'no router answered' : 'NATS is unreachable'));
      this.fleetError = null;
      // lastSeenMs changes on every answer; a page needs an update only when something else did.
      const key = JSON.stringify(fleet, (name, value: unknown) =>
        name === 'lastSeenMs' || name === 'routerId' ? undefined : value,
      );
      this.fleet = fleet;
      if (key !== this.fleetKey) {
        this.fleetKey = key;
        this.publish('fleet', fleet);
      }
    } catch (error) {
      const message = (error as Error).message;
      if (message !== this.fleetError) this.publish('fleet_error', { message });
      this.fleetError = message;
    } finally {
      this.fleetAsking = false;
    }
  }

  /**
   * Every gateway's requests (each answers; gathered until none has answered for a moment): the ones
   * waiting for a router, a load or a slot show before their stream says anything.
   */
  private async askRuns(): Promise<void> {
    if (this.runsAsking || this.stopped) return;
    this.runsAsking = true;
    try {
      const runs: PendingRun[] = [];
      const replies = await this.bus.nc.requestMany(Subjects.gatewayRuns, '{}', {
        strategy: 'stall',
        stall: RUNS_STALL_MS,
        maxWait: Math.max(RUNS_STALL_MS, this.options.fleetIntervalMs / 2),
      });
      for await (const message of replies) {
        try {
          runs.push(...decodeGatewayRuns(message.json()));
        } catch (error) {
          this.warn(`console feed skipped a gateway's runs: ${(error as Error).message}`);
        }
      }
      if (this.stopped) return;
      const loading = new Set([
        ...this.loads.view().map((l) => l.model),
        ...(this.fleet?.workers.flatMap((w) => w.models.filter((m) => m.state === 'loading').map((m) => m.id)) ?? []),
      ]);
      this.live.pending(runs, loading, Date.now());
    } catch {
      // No gateway answered (this one is shutting down): the streams still show what runs.
    } finally {
      this.runsAsking = false;
    }
  }

  private async loadHistory(): Promise<void> {
    try {
      const history = await readRecentEvents(this.bus.nc, 1_000, 2_000);
      if (history.source === 'none') {
        this.activityNote = `${history.reason}: showing the requests this gateway's console feed hears from now on`;
        return;
      }
      this.activitySource = 'events-stream';
      const older: RequestFinishedEvent[] = [];
      for (const { subject, data, at } of history.events) {
        if (subject === Subjects.requestFinished) {
          try {
            older.push(decodeRequestFinished(data));
          } catch {
            // An event from another version that this console cannot read: left out.
          }
        } else {
          try {
            this.lifecycle(subject, data, at, false);
          } catch {
            // Unreadable, or published under another worker's id: left out.
          }
        }
      }
      // Events heard live while the history was read come after it; one in both is shown once.
      const heard = new Set(this.activity.map((event) => `${event.requestId}/${event.finishedAt}`));
      this.activity = [
        ...older.filter((event) => !heard.has(`${event.requestId}/${event.finishedAt}`)),
        ...this.activity,
      ].slice(-KEEP_ACTIVITY);
    } catch (error) {
      this.activityNote = `could not read the events stream (${(error as Error).message})`;
    }
  }

  private addActivity(event: RequestFinishedEvent): void {
    this.activity.push(event);
    if (this.activity.length > KEEP_ACTIVITY) this.activity.shift();
  }

  private lifecycle(subject: string, data: unknown, at: number, live: boolean): void {
    if (!isObject(data)) return;
    let entry: TimelineEntry;
    switch (workerEventOf(subject)?.event ?? subject) {
      case Subjects.modelLoaded: {
        const event = fromWorker(subject, decodeLoadResult(data));
        entry = {
          at,
          kind: 'loaded',
          workerId: event.workerId,
          model: event.model,
          detail: `in ${Math.round(event.loadMs)} ms`,
        };
        break;
      }
      case Subjects.modelUnloaded: {
        const event = fromWorker(subject, decodeUnloadResult(data));
        entry = { at, kind: 'unloaded', workerId: event.workerId, model: event.model, detail: event.reason };
        break;
      }
      case Subjects.modelLoadFailed: {
        const event = fromWorker(subject, decodeLoadFailed(data));
        entry = {
          at: event.at,
          kind: 'load_failed',
          workerId: event.workerId,
          model: event.model,
          detail: event.error,
        };
        break;
      }
      case Subjects.workerUp:
      case Subjects.workerDown: {
        const event = decodeWorkerLifecycle(data);
        entry = {
          at: event.at,
          kind: subject === Subjects.workerUp ? 'worker_up' : 'worker_down',
          workerId: event.workerId,
          model: null,
          // `left`: it said goodbye (a graceful stop); `silent`: its heartbeats stopped.
          detail: event.reason ?? '',
        };
        break;
      }
      default:
        return;
    }
    this.timeline.push(entry);
    if (this.timeline.length > KEEP_TIMELINE) this.timeline.shift();
    if (!live) return;
    if (entry.model && this.loads.end(entry.workerId, entry.model)) this.publish('loads', this.loads.view());
    this.publish('timeline', entry);
    void this.askFleet();
  }
}
