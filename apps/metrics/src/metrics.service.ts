import { Inject, Injectable, Logger, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import { jetstream, type ConsumerMessages } from '@nats-io/jetstream';
import type { Subscription } from '@nats-io/transport-node';
import { BusClient, checkFleetHealth, ensureEventsStream, ensureUsageStream, LIVE_PULL } from '@cortex/bus';
import { CONFIG, type CortexConfig } from '@cortex/config';
import {
  decodeBusStatus,
  decodeDefrag,
  decodeLoadFailed,
  decodeLoadResult,
  decodeMcpToolCalled,
  decodeMessage,
  decodeReplicaEvent,
  decodeRequestFinished,
  decodeUnloadResult,
  decodeUsageRecord,
  EVENTS_STREAM,
  Heartbeat,
  ForgedEventError,
  fromWorker,
  Subjects,
  workerEventOf,
  USAGE_STREAM,
} from '@cortex/contracts';
import { CortexMetrics } from './request.metrics.js';

/** How long start-up waits for JetStream to answer (a NATS cluster forming) before the service gives up. */
const STARTUP_RETRY_MS = 60_000;

/** How often the fleet's verdict is asked for (`cortex_fleet_health`): a third of Prometheus's default scrape interval. */
const HEALTH_EVERY_MS = 5_000;

/**
 * Feeds the registry. Request and lifecycle events come from the JetStream stream, read from its
 * first retained message every time this service starts: counters live in memory, so a restarted
 * metrics service rebuilds them from the log and every request is counted once, however often it
 * restarts (a durable consumer would resume after its last ack and lose what the dead process had
 * counted). JetStream de-duplicates re-published events by message id. Heartbeats and bus status are
 * plain NATS: they only set gauges. Spend counters come the same way from the usage records
 * (`CORTEX_USAGE`, kept for `metrics.usage_retention_s`, for ever by default), so they equal the records
 * after any number of restarts.
 */
@Injectable()
export class MetricsService implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('metrics');
  readonly metrics = new CortexMetrics();
  private readonly subs: Subscription[] = [];
  private timer: NodeJS.Timeout | null = null;
  private healthTimer: NodeJS.Timeout | null = null;
  private readonly streams: ConsumerMessages[] = [];
  /** Streams whose replay has not reached the end yet. */
  private replaying = 2;
  /** True once the replay reached the end of both streams. */
  get caughtUp(): boolean {
    return this.replaying === 0;
  }

  constructor(
    private readonly bus: BusClient,
    @Inject(CONFIG) private readonly config: CortexConfig,
  ) {}

  async onModuleInit(): Promise<void> {
    const onBad = (error: Error): void => this.dropped(error);
    this.subs.push(
      this.bus.subscribe(
        Subjects.heartbeatAll,
        (data, subject) =>
          this.metrics.recordHeartbeat(fromWorker(subject, decodeMessage(Heartbeat, data, 'heartbeat'))),
        onBad,
      ),
      this.bus.subscribe(Subjects.serviceBus, (data) => this.metrics.recordBus(decodeBusStatus(data)), onBad),
    );
    this.timer = setInterval(() => this.metrics.expire(Date.now(), this.config.router.forgetWorkerAfterMs), 1_000);
    // The fleet's verdict, as GET /health gives it: a router's view and a JetStream answer, asked for every few seconds.
    const checkHealth = (): void =>
      void checkFleetHealth(this.bus.nc).then(
        (health) => this.metrics.recordHealth(health),
        (error: Error) => this.logger.warn(`fleet health: ${error.message}`),
      );
    this.healthTimer = setInterval(checkHealth, HEALTH_EVERY_MS);
    checkHealth();
    await this.atStartup('the events stream', () => ensureEventsStream(this.bus.nc, this.config.metrics));
    await this.atStartup('the usage stream', () => ensureUsageStream(this.bus.nc, this.config.metrics.usageRetentionS));
    await this.replay(EVENTS_STREAM, 'event', (subject, data) => this.record(subject, data));
    await this.replay(USAGE_STREAM, 'usage record', (_subject, data) =>
      this.metrics.recordUsage(decodeUsageRecord(data)),
    );
  }

  /** Reads `stream` from its first retained message, then each new one, with an ordered consumer. */
  private async replay(stream: string, noun: string, record: (subject: string, data: unknown) => void): Promise<void> {
    const { consumer, initial } = await this.atStartup(`reading ${stream}`, async () => {
      const consumer = await jetstream(this.bus.nc).consumers.get(stream);
      return { consumer, initial: (await consumer.info()).num_pending };
    });
    let replaying = initial > 0;
    if (!replaying) this.replaying--;
    const messages = await consumer.consume(LIVE_PULL);
    this.streams.push(messages);
    void (async () => {
      let replayed = 0;
      for await (const message of messages) {
        try {
          record(message.subject, message.json());
        } catch (error) {
          this.dropped(error as Error, `${noun} ${message.seq} on ${message.subject}`);
        }
        replayed++;
        if (replaying && message.info.pending === 0) {
          replaying = false;
          this.replaying--;
          this.logger.log(`replayed ${replayed} ${noun}s (${initial} were stored when this service started)`);
        }
      }
    })();
  }

  /**
   * JetStream work at start-up, tried again each second while it fails, for up to STARTUP_RETRY_MS:
   * a NATS cluster that is still forming (no meta leader yet, or not every peer known) times out or
   * refuses placement for a moment, and the service should wait for it, not exit.
   */
  private async atStartup<T>(what: string, work: () => Promise<T>): Promise<T> {
    const deadline = Date.now() + STARTUP_RETRY_MS;
    for (let attempt = 1; ; attempt++) {
      try {
        return await work();
      } catch (error) {
        if (Date.now() >= deadline) throw error;
        this.logger.warn(`${what}: ${(error as Error).message}; trying again (attempt ${attempt})`);
        await new Promise((done) => setTimeout(done, 1_000));
      }
    }
  }

  /** A message that does not count: logged; one published under another worker's id is counted too. */
  private dropped(error: Error, what = 'a message'): void {
    if (error instanceof ForgedEventError) this.metrics.recordForged(error);
    this.logger.warn(`skipped ${what}: ${error.message}`);
  }

  /**
   * Each event is decoded before it counts: a malformed one throws, and `read` logs and skips it. A
   * worker's own event counts only from that worker (see fromWorker).
   */
  private record(subject: string, data: unknown): void {
    switch (workerEventOf(subject)?.event ?? subject) {
      case Subjects.requestFinished:
        return this.metrics.recordRequest(decodeRequestFinished(data));
      case Subjects.mcpToolCalled:
        return this.metrics.recordMcpCall(decodeMcpToolCalled(data));
      case Subjects.modelLoaded:
        return this.metrics.recordLoaded(fromWorker(subject, decodeLoadResult(data)));
      case Subjects.modelUnloaded:
        return this.metrics.recordUnloaded(fromWorker(subject, decodeUnloadResult(data)));
      case Subjects.modelLoadFailed:
        return this.metrics.recordLoadFailed(fromWorker(subject, decodeLoadFailed(data)));
      case Subjects.replicaAdded:
        return this.metrics.recordReplica('added', decodeReplicaEvent(data, 'added'));
      case Subjects.replicaRetired:
        return this.metrics.recordReplica('retired', decodeReplicaEvent(data, 'retired'));
      case Subjects.replicaBlocked:
        return this.metrics.recordReplica('blocked', decodeReplicaEvent(data, 'blocked'));
      case Subjects.workerDefragmented:
        return this.metrics.recordDefrag(fromWorker(subject, decodeDefrag(data)));
      default:
        return undefined;
    }
  }

  async onModuleDestroy(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    if (this.healthTimer) clearInterval(this.healthTimer);
    for (const sub of this.subs) sub.unsubscribe();
    await Promise.all(this.streams.map((messages) => messages.close()));
  }
}
