import { Inject, Injectable, Logger, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import { BusClient, ensureEventsStream, EventPublisher, ModelCatalogue, StreamReader } from '@cortex/bus';
import { CONFIG, type CortexConfig, type ModelConfig } from '@cortex/config';
import { ResponsesAssembly } from '@cortex/wire';
import {
  CortexError,
  Subjects,
  WATCH_INTERVAL_MS,
  workerSubject,
  type Dialect,
  type RequestFinishedEvent,
  type RetrievalApi,
  type TokenCount,
  type UsageOwner,
} from '@cortex/contracts';
import { InferenceRun } from './inference-run.js';
import { RunTrace } from './run-trace.js';
import type { RunServices } from './run-services.js';
import { PendingRuns } from '../console/pending-runs.js';
import { PlacementClient } from './placement-client.js';
import { WorkerEvents } from './worker-events.js';
import { LoadProgressWatch } from './load-progress-watch.js';
import { UsageRecorder } from '../usage/usage-recorder.js';
import type { RequestContext } from '../http/request-context.js';

/** How long a worker declared down has to show it still holds its subjects ("no responders" comes at once). */
const DOWN_PROBE_MS = 1_000;

@Injectable()
export class InferenceService implements OnModuleInit, OnModuleDestroy, RunServices {
  readonly logger = new Logger('inference');
  /**
   * Streams this gateway is reading, by run id: told to their workers every few seconds so they can
   * drop the rest, and ended when their worker is declared down.
   */
  private readonly streams = new Map<string, { workerId: string; reader: StreamReader }>();
  private timer: NodeJS.Timeout | null = null;
  private readonly events: EventPublisher;
  /** Requests from placement to their end, for the console (see PendingRuns). */
  readonly pending = new PendingRuns();
  /** The progress of the cold loads requests wait for. */
  private readonly loadProgress: LoadProgressWatch;
  private readonly stopCatalogue: () => void;
  readonly workerEvents: WorkerEvents;
  readonly placer: PlacementClient;
  readonly responses: ResponsesAssembly;

  constructor(
    readonly bus: BusClient,
    @Inject(CONFIG) readonly config: CortexConfig,
    private readonly usage: UsageRecorder,
    private readonly catalogue: ModelCatalogue,
  ) {
    this.events = new EventPublisher(bus.nc);
    this.responses = new ResponsesAssembly(config.responses.reasoningKey);
    this.workerEvents = new WorkerEvents(bus, this.logger);
    // A worker down: the streams read from it end (the placement client forgets it on its own).
    this.workerEvents.onChange((change) => {
      if (change.type === 'down') void this.endStreamsOf(change.workerId);
    });
    this.loadProgress = new LoadProgressWatch(bus, (name) => catalogue.find(name)?.id ?? name);
    this.placer = new PlacementClient(bus, config.gateway, this.workerEvents, this.loadProgress);
    // A model changed or removed at run time is placed afresh: no reused placement outlives it.
    this.stopCatalogue = catalogue.onChange((id) => this.placer.forgetModel(id));
  }

  async onModuleInit(): Promise<void> {
    this.timer = setInterval(() => this.sendWatch(), WATCH_INTERVAL_MS);
    await ensureEventsStream(this.bus.nc, this.config.metrics).catch((error: Error) =>
      this.logger.warn(`events stream: ${error.message}`),
    );
  }

  /** One request-finished event per request, stored in JetStream under the run id (a retry is stored once), and its usage record billed to `payer`. */
  recordFinished(event: RequestFinishedEvent, runId: string, payer: UsageOwner | null): void {
    this.usage.record(event, runId, payer, this.catalogue.find(event.model)?.cost);
    this.logger.log({
      msg: `${event.dialect} ${event.model}: ${event.status}${event.errorCode ? ` ${event.errorCode}` : ''} in ${event.durationMs} ms`,
      requestId: event.requestId,
      runId,
      worker: event.workerId,
      status: event.status,
      finishReason: event.finishReason,
      promptTokens: event.usage?.promptTokens,
      completionTokens: event.usage?.completionTokens,
      ttftMs: event.timings ? Math.round(event.timings.ttftMs) : undefined,
      coldStart: event.coldStart,
    });
    this.events
      .publish(Subjects.requestFinished, event, runId)
      .catch((error: Error) => this.logger.warn(`${event.requestId}: request-finished event lost: ${error.message}`));
  }

  onModuleDestroy(): void {
    if (this.timer) clearInterval(this.timer);
    this.loadProgress.close();
    this.workerEvents.close();
    this.stopCatalogue();
    this.catalogue.close();
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
        `worker ${workerId} was declared down but still holds its subjects: its ${runIds.length} stream(s) go on, bounded by the idle timeout`,
      );
      return;
    }
    for (const runId of runIds) {
      this.streams
        .get(runId)
        ?.reader.fail(
          new CortexError(
            'worker_lost',
            `worker ${workerId} is down (its heartbeats stopped and nothing serves its subjects)`,
          ),
        );
    }
  }

  private sendWatch(): void {
    const byWorker = new Map<string, string[]>();
    for (const [runId, { workerId }] of this.streams) {
      const runs = byWorker.get(workerId);
      if (runs) runs.push(runId);
      else byWorker.set(workerId, [runId]);
    }
    for (const [workerId, runIds] of byWorker)
      this.bus.publish(workerSubject(Subjects.workerWatch, workerId), { runIds });
  }

  /** The catalogue entry a request names (id or alias), as the live catalogue has it now. */
  modelConfig(name: string): ModelConfig | undefined {
    return this.catalogue.find(name);
  }

  watch(runId: string, workerId: string, reader: StreamReader): void {
    this.streams.set(runId, { workerId, reader });
  }

  unwatch(runId: string): void {
    this.streams.delete(runId);
  }

  /** A run for one request: its spans continue its headers' `traceparent`, and it reports its usage to the request's meter. */
  open(dialect: Dialect | RetrievalApi, context: RequestContext): InferenceRun {
    return new InferenceRun(this, dialect, context, RunTrace.open(dialect, context.id, context.headers), context.meter);
  }

  /** count_tokens / input_tokens: decoded and placed like a generation, but only tokenized. */
  async countTokens(dialect: Dialect, context: RequestContext, body: unknown): Promise<TokenCount> {
    // A count emits no request-finished event, so its spans are ended here.
    const trace = RunTrace.open(dialect, context.id, context.headers);
    // It reports no usage: a count is not charged.
    const run = new InferenceRun(this, dialect, context, trace, null);
    try {
      // No early placement: a ready-only ask binds the conversation's key to the worker it names, and
      // counting must not move a conversation.
      await run.decode(body, undefined, undefined, false);
      const count = await run.countTokens();
      trace.ended();
      return count;
    } catch (error) {
      trace.ended(error);
      throw error;
    }
  }
}
