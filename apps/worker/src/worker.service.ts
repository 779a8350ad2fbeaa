import { hostname } from 'node:os';
import { performance } from 'node:perf_hooks';
import { Inject, Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import {
  CortexError,
  WATCH_INTERVAL_MS,
  type CanonicalRequest,
  type EmbedCommand,
  type EmbedResult,
  type EstimateCommand,
  type PullCommand,
  type PullResult,
  type GenerateAccepted,
  type GenerateCommand,
  type LoadCommand,
  type LoadResult,
  type RankCommand,
  type RankResult,
  type TokenCount,
  type UnloadReason,
  type UnloadResult,
} from '@cortex/contracts';
import { BusClient, ensureEventsStream, StreamPublisher } from '@cortex/bus';
import { GenerationTrace } from './generation-trace.js';
import { CONFIG, type CortexConfig } from '@cortex/config';
import { isRetrievalModel, type Engine, type EngineModel, type RetrievalModel } from './engine/index.js';
import { HeartbeatPublisher } from './heartbeat.js';
import { soonOrFirst } from './soon-or-first.js';
import { RunEvents, startSoon } from './run-events.js';
import { ModelRegistry, type RunningRequests } from './model-registry.js';
import { ENGINE, WORKER_ID } from './worker.tokens.js';

/**
 * One generate command being served, keyed by the gateway's run id (one per attempt on a worker), not
 * the client's request id: that one travels in the `x-request-id` header and is only logged.
 */
interface ActiveRun {
  controller: AbortController;
  model: string;
  /** Last time a gateway said it still reads this stream. */
  watchedAt: number;
  background: boolean;
  /** A `cancel` command stopped it (a background run's end is then `cancelled`, not a failure). */
  asked: boolean;
  /** Settles when the run has ended and its sequence is free. */
  done: Promise<void>;
}

/** Keep-alive period on a run's stream: silence past the gateway's idle timeout means a dead worker. */
const STREAM_KEEPALIVE_MS = 1_000;

/**
 * The worker's bus-facing side: admits generate commands and streams their events, cancels runs
 * (asked, unwatched, or at unload), and drains on shutdown. Models live in `ModelRegistry`, the
 * heartbeat in `HeartbeatPublisher`.
 */
@Injectable()
export class WorkerService implements OnApplicationBootstrap, OnApplicationShutdown, RunningRequests {
  private readonly logger = new Logger('worker');
  /** Runs by run id. */
  private readonly runs = new Map<string, ActiveRun>();
  private readonly models: ModelRegistry;
  private readonly heartbeats: HeartbeatPublisher;
  private watchTimer: NodeJS.Timeout | null = null;

  constructor(
    @Inject(CONFIG) private readonly config: CortexConfig,
    @Inject(ENGINE) private readonly engine: Engine,
    @Inject(WORKER_ID) readonly workerId: string,
    private readonly bus: BusClient,
  ) {
    const beat = (): Promise<void> => this.heartbeats.beat();
    this.models = new ModelRegistry({ config, engine, workerId, bus, logger: this.logger, runs: this, beat });
    this.heartbeats = new HeartbeatPublisher(bus, workerId, config.worker.heartbeatMs, this.models, this.logger);
  }

  async onApplicationBootstrap(): Promise<void> {
    await ensureEventsStream(this.bus.nc, this.config.metrics).catch((error: Error) =>
      this.logger.warn(`events stream: ${error.message}`),
    );
    this.heartbeats.start();
    this.watchTimer = setInterval(() => this.dropUnwatched(), WATCH_INTERVAL_MS / 2);
    this.logger.log(`worker ${this.workerId} up on ${this.engine.backend}`);
  }

  /**
   * Acknowledges at once, then runs the request in the background, publishing on its stream subject.
   * `requestId` is the client's request id from the message header, for the logs.
   */
  generate(command: GenerateCommand, receivedAt = performance.now(), requestId?: string): GenerateAccepted {
    const { runId } = command;
    const served = this.admit(command.request.model, runId);
    const model = served.model;
    const controller = new AbortController();
    const queuePosition = model.queued + Math.max(0, model.inFlight + 1 - model.slots);
    served.touch();
    const { tier, account, keyId } = command.priority ?? {};
    // Written while the prompt is evaluated, not before it is rendered (see soonOrFirst).
    const started = soonOrFirst(() =>
      this.logger.log({ msg: `generating with ${served.id}`, requestId, runId, queuePosition, tier, account, keyId }),
    );
    const done = this.run(command, model, controller, receivedAt, started, requestId).finally(() => {
      this.runs.delete(runId);
      served.touch();
      this.heartbeats.soon();
      void this.models.maybeDefrag();
    });
    this.runs.set(runId, {
      controller,
      model: served.id,
      watchedAt: Date.now(),
      done,
      background: command.background === true,
      asked: false,
    });
    return { runId, workerId: this.workerId, queuePosition };
  }

  async tokenize(request: CanonicalRequest): Promise<TokenCount> {
    return { model: request.model, inputTokens: await this.models.ready(request.model).model.countTokens(request) };
  }

  embed(command: EmbedCommand, requestId?: string): Promise<EmbedResult> {
    return this.read(command.model, command.runId, requestId, async (model, signal) => {
      const { vectors, tokens } = await model.embed(command.inputs, signal);
      return { model: model.id, workerId: this.workerId, embeddings: vectors, promptTokens: tokens };
    });
  }

  rank(command: RankCommand, requestId?: string): Promise<RankResult> {
    return this.read(command.model, command.runId, requestId, async (model, signal) => {
      const { scores, tokens } = await model.rank(command.query, command.documents, signal);
      return { model: model.id, workerId: this.workerId, scores, promptTokens: tokens };
    });
  }

  /**
   * Runs an embedding or ranking request on a ready model and answers with its result. It is a run
   * like a generation (cancel stops it, an unload drains it) but nobody watches it: the gateway
   * waits for the reply instead.
   */
  private async read<T>(
    name: string,
    runId: string,
    requestId: string | undefined,
    work: (model: EngineModel & RetrievalModel, signal: AbortSignal) => Promise<T>,
  ): Promise<T> {
    const served = this.admit(name, runId);
    const model = served.model;
    if (!isRetrievalModel(model))
      throw new CortexError(
        'invalid_request',
        `the model '${name}' is a chat model; it serves no embeddings or rankings`,
        { param: 'model' },
      );
    const controller = new AbortController();
    served.touch();
    this.logger.log({
      msg: `${model.kind === 'ranking' ? 'ranking' : 'embedding'} with ${served.id}`,
      requestId,
      runId,
    });
    const result = work(model, controller.signal).finally(() => {
      this.runs.delete(runId);
      served.touch();
      this.heartbeats.soon();
    });
    const done = result.then(
      () => undefined,
      () => undefined,
    );
    this.runs.set(runId, {
      controller,
      model: served.id,
      watchedAt: Number.POSITIVE_INFINITY,
      done,
      background: false,
      asked: false,
    });
    return result;
  }

  /** The ready model for a new run: refused while draining, when the model is not ready here, or for a run id already running. */
  private admit(model: string, runId: string): ReturnType<ModelRegistry['ready']> {
    if (this.models.draining)
      throw new CortexError('service_unavailable', `worker ${this.workerId} is draining`, { retryAfter: 1 });
    const served = this.models.ready(model);
    if (this.runs.has(runId)) throw new CortexError('invalid_request', `request ${runId} is already running`);
    return served;
  }

  /** Stops a run; `asked` when a `cancel` command asked for it (not this worker's own shutdown or unload). */
  cancel(runId: string, reason = 'cancelled', asked = false): boolean {
    const run = this.runs.get(runId);
    if (run) run.asked ||= asked;
    run?.controller.abort(new CortexError('cancelled', reason));
    return run !== undefined;
  }

  get size(): number {
    return this.runs.size;
  }

  onModel(model: string): { runId: string; done: Promise<void> }[] {
    return [...this.runs.entries()]
      .filter(([, run]) => run.model === model)
      .map(([runId, run]) => ({ runId, done: run.done }));
  }

  /** For `cortex status`: ready when not draining; the detail lists model states. */
  readiness(): { ready: boolean; detail: string } {
    return { ready: !this.models.draining, detail: this.models.describe() || 'no models loaded' };
  }

  /** A gateway still streams these runs. */
  watch(runIds: readonly string[]): void {
    const now = Date.now();
    for (const id of runIds) {
      const run = this.runs.get(id);
      if (run) run.watchedAt = now;
    }
  }

  /**
   * A run no gateway has watched for three intervals lost its reader (the gateway died or was cut
   * off): stop it so its sequence serves someone who is still there.
   */
  private dropUnwatched(): void {
    const limit = Date.now() - WATCH_INTERVAL_MS * 3;
    for (const [id, run] of this.runs) {
      // A background run has no reader by design; its events are kept in JetStream.
      if (!run.background && run.watchedAt < limit && !run.controller.signal.aborted) {
        this.logger.warn(`request ${id}: no gateway is reading it any more; cancelling`);
        this.cancel(id, 'abandoned by its gateway');
      }
    }
  }

  /** `started` writes the run's "generating" line if it is not out yet: before any other line of the run. */
  private async run(
    command: GenerateCommand,
    model: EngineModel,
    controller: AbortController,
    receivedAt: number,
    started: () => void,
    requestId?: string,
  ): Promise<void> {
    const { runId } = command;
    const trace = GenerationTrace.start(command, this.workerId, model.id, receivedAt);
    const stream = trace.run(
      () =>
        new StreamPublisher(
          this.bus.nc,
          command.streamSubject,
          this.config.worker.streamIntervalMs,
          STREAM_KEEPALIVE_MS,
        ),
    );
    const { emit } = new RunEvents({
      runId,
      workerId: this.workerId,
      background: command.background === true,
      asked: () => this.runs.get(runId)?.asked === true,
      signal: controller.signal,
      sinks: [(event) => trace.event(event), startSoon((event) => stream.emit(event))],
      finished: (event) => {
        started();
        this.logger.log({
          msg:
            `finished (${event.reason}): ${event.usage.completionTokens} ` +
            `tokens at ${Math.round(event.timings.decodeTokensPerSecond)} tok/s`,
          requestId,
          runId,
          promptTokens: event.usage.promptTokens,
          cachedPromptTokens: event.usage.cachedPromptTokens,
          ttftMs: Math.round(event.timings.ttftMs * 10) / 10,
        });
      },
    });
    try {
      const warn = (message: string): void => {
        started();
        this.logger.warn({ msg: message, requestId, runId });
      };
      await trace.run(() =>
        model.generate({
          request: command.request,
          receivedAt,
          signal: controller.signal,
          emit,
          warn,
          ...(command.priority && { priority: command.priority }),
          ...(command.resume && { resume: command.resume }),
        }),
      );
    } catch (error) {
      const cortex =
        error instanceof CortexError
          ? error
          : new CortexError('internal', `generation failed: ${(error as Error).message}`, { cause: error });
      started();
      if (!(controller.signal.aborted && !(error instanceof CortexError))) {
        this.logger.warn({ msg: `failed: ${cortex.message}`, requestId, runId, code: cortex.code });
      }
      emit({ type: 'error', error: cortex.toBody() });
    } finally {
      stream.close();
      trace.end();
    }
  }

  load(command: LoadCommand): Promise<LoadResult> {
    return this.models.load(command);
  }

  cancelLoad(model: string, reason: string): { model: string; workerId: string; cancelled: boolean } {
    return { model, workerId: this.workerId, cancelled: this.models.cancelLoad(model, reason) };
  }

  estimate(command: EstimateCommand): Promise<{ bytes: number }> {
    return this.models.estimate(command);
  }

  pull(command: PullCommand): Promise<PullResult> {
    return this.models.pull(command);
  }

  unload(model: string, drain = true, reason: UnloadReason = 'admin'): Promise<UnloadResult> {
    return this.models.unload(model, drain, reason);
  }

  /**
   * Drain: refuse new work, say so, let running requests finish (bounded), say goodbye, then free the
   * backend. The heartbeats go on (saying draining) until the runs are over: a worker that fell silent
   * would be declared down, and gateways would end its streams as lost while it still generates them.
   * The goodbye makes routers forget it at once: it left on purpose, and is no reason to call the fleet
   * impaired.
   */
  async onApplicationShutdown(): Promise<void> {
    this.models.shutDown();
    if (this.watchTimer) clearInterval(this.watchTimer);
    await this.heartbeats.beat();
    const running = (): Promise<unknown> => Promise.allSettled([...this.runs.values()].map((run) => run.done));
    const drained = await Promise.race([
      running().then(() => true),
      new Promise<false>((resolve) => setTimeout(() => resolve(false), this.config.drainTimeoutMs).unref()),
    ]);
    if (!drained) {
      for (const id of this.runs.keys()) this.cancel(id, 'worker shutting down');
      await running();
    }
    await this.heartbeats.goodbye();
    await this.models.disposeAll();
    await this.engine.dispose();
  }
}

export function defaultWorkerId(config: CortexConfig, backend: string): string {
  if (config.worker.id) {
    // A background run's events that no worker wrote are published under `_` (NO_WORKER).
    if (config.worker.id.startsWith('_'))
      throw new Error(
        `worker.id "${config.worker.id}": a worker id must not start with '_' (kept for events no worker wrote); pick another id`,
      );
    return config.worker.id;
  }
  const host = hostname()
    .replace(/[^A-Za-z0-9_-]/g, '-')
    .slice(0, 40);
  return `${host}-${backend}${config.worker.device ?? ''}`;
}
