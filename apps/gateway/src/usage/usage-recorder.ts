import { Inject, Injectable, Logger, type OnModuleInit } from '@nestjs/common';
import { DeliverPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { BusClient, EventPublisher, ensureUsageStream } from '@cortex/bus';
import { CONFIG, type CortexConfig } from '@cortex/config';
import {
  CortexError,
  decodeUsageRecord,
  Subjects,
  USAGE_STREAM,
  usageRecordOf,
  type RequestFinishedEvent,
  type TokenPrice,
  type UsageOwner,
} from '@cortex/contracts';
import { FinalWrites } from './final-writes.js';
import { RequestMeter } from './request-meter.js';
import { UsageSummary, type UsageQuery, type UsageRow } from './usage-query.decider.js';

/** The longest a usage query reads the stream before it gives up with a retryable error. */
export const USAGE_QUERY_MS = 30_000;
/** Clocks of gateways and NATS servers differ a little: a query starts reading this much before `from`. */
const CLOCK_SLACK_MS = 60_000;

/**
 * Turns every finished run that used tokens into a usage record on the `CORTEX_USAGE` stream, under
 * the key and account that pay for the request (its RequestMeter says), with the
 * run id as message id: a retried publish is stored once. Answers `GET /admin/usage` by reading the
 * stream from the query's start.
 */
@Injectable()
export class UsageRecorder implements OnModuleInit {
  private readonly logger = new Logger('usage');
  private readonly events: EventPublisher;

  constructor(
    private readonly bus: BusClient,
    private readonly writes: FinalWrites,
    @Inject(CONFIG) private readonly config: CortexConfig,
  ) {
    this.events = new EventPublisher(bus.nc);
  }

  async onModuleInit(): Promise<void> {
    await ensureUsageStream(this.bus.nc, this.config.metrics.usageRetentionS).catch((error: Error) =>
      this.logger.warn(`usage stream: ${error.message}`),
    );
  }

  /**
   * Publishes the usage record of one finished run, billed to `payer` (none when it used no tokens),
   * with the cost of its tokens at `price` (the model's in the live catalogue now) when it has one.
   * That cost is what the request's money budgets are charged (RequestMeter.charge).
   */
  record(event: RequestFinishedEvent, runId: string, payer: UsageOwner | null, price?: TokenPrice): void {
    const record = usageRecordOf(event, payer, runId, price);
    if (!record) return;
    RequestMeter.charge(payer, record);
    // Tried again while NATS does not take it, and waited for at shutdown (FinalWrites); the message id
    // makes a retry safe: JetStream keeps one copy within its 2-minute duplicate window.
    void this.writes
      .track(this.writes.write(() => this.events.publish(Subjects.usageRecorded, record, record.id)))
      .catch((error: Error) =>
        this.logger.error(`${record.request_id}: usage record ${record.id} lost: ${error.message}`),
      );
  }

  /**
   * Sums the stored records matching `query` as they are read, with an ordered consumer from the query's start up to
   * the stream's last record now.
   */
  async query(query: UsageQuery): Promise<UsageRow[]> {
    const info = await (await jetstreamManager(this.bus.nc, { timeout: USAGE_QUERY_MS })).streams.info(USAGE_STREAM);
    const start = Math.max(0, query.from - CLOCK_SLACK_MS);
    const last = info.state.last_seq;
    const summary = new UsageSummary(query);
    if (info.state.messages === 0 || Date.parse(info.state.last_ts) < start) return summary.rows();
    const consumer = await jetstream(this.bus.nc, { timeout: USAGE_QUERY_MS }).consumers.get(USAGE_STREAM, {
      deliver_policy: DeliverPolicy.StartTime,
      opt_start_time: new Date(start).toISOString(),
    });
    const messages = await consumer.consume();
    let complete = false;
    const timer = setTimeout(() => void messages.close(), USAGE_QUERY_MS);
    try {
      for await (const message of messages) {
        try {
          summary.add(decodeUsageRecord(message.json()));
        } catch (error) {
          this.logger.warn(`skipped usage record ${message.seq}: ${(error as Error).message}`);
        }
        if (message.seq >= last || message.info.pending === 0) {
          complete = true;
          break;
        }
      }
    } finally {
      clearTimeout(timer);
      await messages.close();
    }
    if (!complete)
      throw new CortexError(
        'service_unavailable',
        `reading the usage records took over ${USAGE_QUERY_MS / 1000} s; narrow the range (from, to) or retry`,
        { retryAfter: 5 },
      );
    return summary.rows();
  }
}
