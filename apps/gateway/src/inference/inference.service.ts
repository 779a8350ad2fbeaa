import { Inject, Injectable, Logger, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import { BusClient, ensureEventsStream, ModelCatalogue } from '@cortex/bus';
import { CONFIG, type CortexConfig, type ModelConfig } from '@cortex/config';
import { ResponsesAssembly } from '@cortex/wire';
import type { Dialect, RetrievalApi, TokenCount } from '@cortex/contracts';
import { InferenceRun } from './inference-run.js';
import { RunTrace } from './run-trace.js';
import type { RunServices } from './run-services.js';
import { PendingRuns } from '../console/pending-runs.js';
import { PlacementClient } from './placement-client.js';
import { WorkerEvents } from './worker-events.js';
import { LoadProgressWatch } from './load-progress-watch.js';
import { RunRecorder } from './run-recorder.js';
import { StreamWatch } from './stream-watch.js';
import { UsageRecorder } from '../usage/usage-recorder.js';
import type { RequestContext } from '../http/request-context.js';

@Injectable()
export class InferenceService implements OnModuleInit, OnModuleDestroy {
  readonly logger = new Logger('inference');
  /** Requests from placement to their end, for the console (see PendingRuns). */
  readonly pending = new PendingRuns();
  /** The progress of the cold loads requests wait for. */
  private readonly loadProgress: LoadProgressWatch;
  private readonly stopCatalogue: () => void;
  readonly workerEvents: WorkerEvents;
  readonly placer: PlacementClient;
  readonly responses: ResponsesAssembly;
  /** The streams this gateway reads (see StreamWatch). */
  private readonly streams: StreamWatch;
  /** What every run works with (see RunServices). */
  private readonly services: RunServices;

  constructor(
    readonly bus: BusClient,
    @Inject(CONFIG) readonly config: CortexConfig,
    usage: UsageRecorder,
    private readonly catalogue: ModelCatalogue,
  ) {
    this.workerEvents = new WorkerEvents(bus, this.logger);
    this.streams = new StreamWatch(bus, this.logger, this.workerEvents);
    this.loadProgress = new LoadProgressWatch(bus, (name) => catalogue.find(name)?.id ?? name);
    this.placer = new PlacementClient(bus, config.gateway, this.workerEvents, this.loadProgress);
    // A model changed or removed at run time is placed afresh: no reused placement outlives it.
    this.stopCatalogue = catalogue.onChange((id) => this.placer.forgetModel(id));
    this.responses = new ResponsesAssembly(config.responses.reasoningKey);
    this.services = {
      bus,
      config,
      logger: this.logger,
      placer: this.placer,
      responses: this.responses,
      streams: this.streams,
      recorder: new RunRecorder(bus, usage, catalogue, this.logger),
      pending: this.pending,
      catalogue,
    };
  }

  async onModuleInit(): Promise<void> {
    await ensureEventsStream(this.bus.nc, this.config.metrics).catch((error: Error) =>
      this.logger.warn(`events stream: ${error.message}`),
    );
  }

  /** The catalogue entry a request names (id or alias), as the live catalogue has it now. */
  modelConfig(name: string): ModelConfig | undefined {
    return this.catalogue.find(name);
  }

  onModuleDestroy(): void {
    this.streams.close();
    this.loadProgress.close();
    this.workerEvents.close();
    this.stopCatalogue();
    this.catalogue.close();
  }

  /** A run for one request: its spans continue its headers' `traceparent`, and it reports its usage to the request's meter. */
  open(dialect: Dialect | RetrievalApi, context: RequestContext): InferenceRun {
    return new InferenceRun(
      this.services,
      dialect,
      context,
      RunTrace.open(dialect, context.id, context.headers),
      context.meter,
    );
  }

  /** count_tokens / input_tokens: decoded and placed like a generation, but only tokenized. */
  async countTokens(dialect: Dialect, context: RequestContext, body: unknown): Promise<TokenCount> {
    // A count emits no request-finished event, so its spans are ended here.
    const trace = RunTrace.open(dialect, context.id, context.headers);
    // It reports no usage: a count is not charged.
    const run = new InferenceRun(this.services, dialect, context, trace, null);
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
