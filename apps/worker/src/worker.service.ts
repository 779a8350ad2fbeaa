import { hostname } from 'node:os';
import { performance } from 'node:perf_hooks';
import { Inject, Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import {
  CortexError,
  heartbeatSubject,
  Subjects,
  WATCH_INTERVAL_MS,
  type CanonicalRequest,
  type DefragEvent,
  type EstimateCommand,
  type LoadFailedEvent,
  type GenerateAccepted,
  type MemoryInfo,
  type TokenCount,
  type LoadProgress,
  type UnloadReason,
  type UnloadResult,
  type GenerateCommand,
  type Heartbeat,
  type LoadCommand,
  type LoadResult,
  type LoadedModel,
  type ModelState,
  type StreamEventBody,
  mib,
} from '@cortex/contracts';
import { BusClient, ensureEventsStream, EventPublisher, StreamPublisher } from '@cortex/bus';
import { CONFIG, type CortexConfig } from '@cortex/config';
import { ENGINE, WORKER_ID } from './worker.tokens.js';
import type { Engine, EngineModel } from './engine/index.js';

interface ModelEntry {
  id: string;
  state: ModelState;
  model: EngineModel | null;
  loading: Promise<LoadResult> | null;
  /** An unload under way: a second unload command (another router, an admin) joins it. */
  unloading: Promise<UnloadResult> | null;
  lastUsedAt: number;
  /** Estimated device memory of the model and its context, reserved from the budget while loading. */
  bytes: number;
}

interface ActiveRequest {
  controller: AbortController;
  model: string;
  /** Last time a gateway said it still reads this stream. */
  watchedAt: number;
  /** Settles when the request has ended and its sequence is free. */
  done: Promise<void>;
}

/** Keep-alive period on a request's stream: silence past the gateway's idle timeout means a dead worker. */
const STREAM_KEEPALIVE_MS = 1_000;

@Injectable()
export class WorkerService implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger = new Logger('worker');
  private readonly models = new Map<string, ModelEntry>();
  private readonly active = new Map<string, ActiveRequest>();
  private heartbeatTimer: NodeJS.Timeout | null = null;
  private watchTimer: NodeJS.Timeout | null = null;
  private readonly startedAt = Date.now();
  private shuttingDown = false;
  /** Load/unload cycles since the backend was (re)created; `eviction.defrag_after_cycles` acts on it. */
  private cycles = 0;
  private defragging = false;

  /** Refusing new work: shutting down, or recreating the backend (a defrag ending must not undo a shutdown). */
  private get draining(): boolean {
    return this.shuttingDown || this.defragging;
  }

  constructor(
    @Inject(CONFIG) private readonly config: CortexConfig,
    @Inject(ENGINE) private readonly engine: Engine,
    @Inject(WORKER_ID) readonly workerId: string,
    private readonly bus: BusClient,
  ) {
    this.events = new EventPublisher(bus.nc);
  }

  private readonly events: EventPublisher;

  async onApplicationBootstrap(): Promise<void> {
    await ensureEventsStream(this.bus.nc, this.config.metrics).catch((error: Error) => this.logger.warn(`events stream: ${error.message}`));
    this.heartbeatTimer = setInterval(() => void this.heartbeat(), this.config.worker.heartbeatMs);
    this.watchTimer = setInterval(() => this.dropUnwatched(), WATCH_INTERVAL_MS / 2);
    void this.heartbeat();
    this.logger.log(`worker ${this.workerId} up on ${this.engine.backend}`);
  }

  /** Acknowledges at once, then runs the request in the background, publishing on its stream subject. */
  generate(command: GenerateCommand, receivedAt = performance.now(), requestId?: string): GenerateAccepted {
    if (this.draining) throw new CortexError('service_unavailable', `worker ${this.workerId} is draining`, { retryAfter: 1 });
    const entry = this.models.get(command.request.model);
    if (!entry?.model || entry.state !== 'ready') {
      const state = entry ? entry.state : 'not loaded';
      throw new CortexError('model_not_ready', `model ${command.request.model} is ${state} on ${this.workerId}`, { retryAfter: 1 });
    }
    if (this.active.has(command.requestId)) {
      throw new CortexError('invalid_request', `request ${command.requestId} is already running`);
    }
    const model = entry.model;
    const controller = new AbortController();
    const queuePosition = model.queued + Math.max(0, model.inFlight + 1 - model.slots);
    entry.lastUsedAt = Date.now();
    this.logger.log({ msg: `generating with ${entry.id}`, requestId, runId: command.requestId, queuePosition });
    const done = this.run(command, model, controller, receivedAt, requestId).finally(() => {
      this.active.delete(command.requestId);
      entry.lastUsedAt = Date.now();
      this.heartbeatSoon();
      void this.maybeDefrag();
    });
    this.active.set(command.requestId, { controller, model: entry.id, watchedAt: Date.now(), done });
    return { requestId: command.requestId, workerId: this.workerId, queuePosition };
  }

  tokenize(request: CanonicalRequest): TokenCount {
    const entry = this.models.get(request.model);
    if (!entry?.model || entry.state !== 'ready') {
      throw new CortexError('model_not_ready', `model ${request.model} is ${entry ? entry.state : 'not loaded'} on ${this.workerId}`, { retryAfter: 1 });
    }
    return { model: request.model, inputTokens: entry.model.countTokens(request) };
  }

  cancel(requestId: string, reason = 'cancelled'): boolean {
    const active = this.active.get(requestId);
    active?.controller.abort(new CortexError('cancelled', reason));
    return active !== undefined;
  }

  /** For `cortex status`: ready when not draining; the detail lists model states. */
  readiness(): { ready: boolean; detail: string } {
    const models = [...this.models.values()].map((m) => `${m.id} ${m.state}`).join(', ');
    return { ready: !this.draining, detail: models || 'no models loaded' };
  }

  /** A gateway still streams these requests. */
  watch(requestIds: readonly string[]): void {
    const now = Date.now();
    for (const id of requestIds) {
      const active = this.active.get(id);
      if (active) active.watchedAt = now;
    }
  }

  /**
   * A request no gateway has watched for three intervals lost its reader (the gateway died or was cut
   * off): stop it so its sequence serves someone who is still there.
   */
  private dropUnwatched(): void {
    const limit = Date.now() - WATCH_INTERVAL_MS * 3;
    for (const [id, active] of this.active) {
      if (active.watchedAt < limit && !active.controller.signal.aborted) {
        this.logger.warn(`request ${id}: no gateway is reading it any more; cancelling`);
        this.cancel(id, 'abandoned by its gateway');
      }
    }
  }

  private async run(command: GenerateCommand, model: EngineModel, controller: AbortController, receivedAt: number, requestId?: string): Promise<void> {
    const stream = new StreamPublisher(this.bus.nc, command.streamSubject, this.config.worker.streamIntervalMs, STREAM_KEEPALIVE_MS);
    let done = false;
    const emit = (event: StreamEventBody): void => {
      if (done) return;
      if (event.type === 'start') event = { ...event, requestId: command.requestId, workerId: this.workerId };
      if (event.type === 'finish' || event.type === 'error') done = true;
      if (event.type === 'finish') {
        this.logger.log({
          msg: `finished (${event.reason}): ${event.usage.completionTokens} tokens at ${Math.round(event.timings.decodeTokensPerSecond)} tok/s`,
          requestId,
          runId: command.requestId,
          promptTokens: event.usage.promptTokens,
          cachedPromptTokens: event.usage.cachedPromptTokens,
          ttftMs: Math.round(event.timings.ttftMs * 10) / 10,
        });
      }
      stream.emit(event);
    };
    try {
      await model.generate({ request: command.request, receivedAt, signal: controller.signal, emit });
    } catch (error) {
      const cortex =
        error instanceof CortexError
          ? error
          : new CortexError('internal', `generation failed: ${(error as Error).message}`, { cause: error });
      if (!(controller.signal.aborted && !(error instanceof CortexError))) {
        this.logger.warn({ msg: `failed: ${cortex.message}`, requestId, runId: command.requestId, code: cortex.code });
      }
      emit({ type: 'error', error: cortex.toBody() });
    } finally {
      stream.close();
    }
  }

  /** Loads a model once; concurrent loads of the same model share one promise. */
  load(command: LoadCommand): Promise<LoadResult> {
    if (this.draining) return Promise.reject(new CortexError('service_unavailable', `worker ${this.workerId} is draining`, { retryAfter: 1 }));
    const existing = this.models.get(command.model);
    if (existing?.state === 'ready' && existing.model) {
      return Promise.resolve({ model: command.model, workerId: this.workerId, loadMs: 0, sizeBytes: existing.bytes });
    }
    if (existing?.loading) return existing.loading;
    const entry: ModelEntry = { id: command.model, state: 'loading', model: null, loading: null, unloading: null, lastUsedAt: Date.now(), bytes: 0 };
    this.models.set(command.model, entry);
    entry.loading = this.doLoad(command, entry).finally(() => (entry.loading = null));
    void this.heartbeat();
    return entry.loading;
  }

  private async doLoad(command: LoadCommand, entry: ModelEntry): Promise<LoadResult> {
    const started = performance.now();
    const log = (line: string): void => this.logger.log(`${command.model}: ${line}`);
    try {
      const path = await this.engine.resolveSource(command.source, this.config.worker.modelsDir, log);
      entry.bytes = await this.engine.estimate({ path, contextSize: command.contextSize, slots: command.slots });
      await this.assertFits(command.model, entry.bytes);
      let lastStep = -1;
      const model = await this.engine.load(
        { id: command.model, path, contextSize: command.contextSize, slots: command.slots, maxQueue: this.config.worker.maxQueue },
        (fraction) => {
          const step = Math.floor(fraction * 4);
          if (step > lastStep) {
            lastStep = step;
            log(`loading ${Math.round(fraction * 100)}%`);
            const progress: LoadProgress = { workerId: this.workerId, model: command.model, fraction };
            this.bus.publish(Subjects.modelProgressed, progress);
          }
        },
      );
      entry.model = model;
      entry.state = 'ready';
      const result: LoadResult = {
        model: command.model,
        workerId: this.workerId,
        loadMs: performance.now() - started,
        sizeBytes: entry.bytes,
      };
      const markers = model.reasoningMarkers ? `, reasoning markers ${model.reasoningMarkers.join('…')}` : '';
      log(`ready in ${Math.round(result.loadMs)} ms (${model.slots} slots${markers})`);
      this.publishEvent(Subjects.modelLoaded, result, `${this.workerId}.${command.model}.loaded.${Date.now()}`);
      return result;
    } catch (error) {
      // A failed load leaves nothing behind: the model is simply not there; load_failed says why.
      const message = (error as Error).message;
      this.models.delete(command.model);
      this.logger.error(`${command.model}: load failed: ${message}`);
      const failed: LoadFailedEvent = { workerId: this.workerId, at: Date.now(), model: command.model, error: message };
      this.publishEvent(Subjects.modelLoadFailed, failed, `${this.workerId}.${command.model}.failed.${failed.at}`);
      throw error instanceof CortexError ? error : new CortexError('model_load_failed', `loading ${command.model} failed: ${message}`, { cause: error });
    } finally {
      void this.heartbeat();
    }
  }

  /** Memory the worker may still give to models: device free memory, capped by the budget. */
  private memory(device: { freeBytes: number }, except?: string): MemoryInfo {
    const used = [...this.models.values()].filter((m) => m.id !== except).reduce((sum, m) => sum + m.bytes, 0);
    const budget = this.config.worker.memoryBudget;
    return { budgetBytes: budget, usedBytes: used, freeBytes: Math.max(0, budget > 0 ? Math.min(device.freeBytes, budget - used) : device.freeBytes) };
  }

  async estimate(command: EstimateCommand): Promise<{ bytes: number }> {
    const path = await this.engine.resolveSource(command.source, this.config.worker.modelsDir, (line) => this.logger.log(line));
    return { bytes: await this.engine.estimate({ path, contextSize: command.contextSize, slots: command.slots }) };
  }

  /**
   * After `defrag_after_cycles` load/unload cycles, once no request is running: drop every model,
   * dispose the backend and create it anew, so memory fragmented by the cycles comes back whole. The
   * worker drains (refuses new work) meanwhile; routers reload its pinned models when it is back.
   */
  private async maybeDefrag(): Promise<void> {
    const after = this.config.eviction.defragAfterCycles;
    if (after <= 0 || this.cycles < after || this.draining) return;
    // Not while another model is still loading or being unloaded (unloads may run side by side).
    if (this.active.size > 0 || [...this.models.values()].some((m) => m.loading || m.state === 'unloading')) return;
    this.defragging = true;
    await this.heartbeat();
    const dropped = [...this.models.keys()];
    try {
      this.logger.log({ msg: `defragmenting after ${this.cycles} load/unload cycles: dropping ${dropped.join(', ') || 'no models'} and recreating the backend`, cycles: this.cycles });
      for (const entry of this.models.values()) await entry.model?.dispose();
      this.models.clear();
      await this.engine.restart();
      const event: DefragEvent = { workerId: this.workerId, at: Date.now(), cycles: this.cycles, dropped };
      this.publishEvent(Subjects.workerDefragmented, event, `${this.workerId}.defrag.${event.at}`);
      this.cycles = 0;
    } catch (error) {
      this.logger.error(`defragmentation failed: ${(error as Error).message}`);
    } finally {
      this.defragging = false;
      void this.heartbeat();
    }
  }

  /** Refuses, with the numbers, a load that would not fit the device or the configured budget. */
  private async assertFits(model: string, bytes: number): Promise<void> {
    const device = await this.engine.device();
    const { usedBytes: others, freeBytes: free } = this.memory(device, model);
    const budget = this.config.worker.memoryBudget;
    if (bytes > free) {
      const where = budget > 0 ? `of a ${mib(budget)} budget with ${mib(others)} in use` : `free on ${device.name}`;
      throw new CortexError(
        'insufficient_memory',
        `${model} needs about ${mib(bytes)} but only ${mib(Math.max(0, free))} is ${where}; unload a model, raise worker.memory_budget, or use a smaller context_size/slots`,
      );
    }
  }

  /** Stops serving a model: waits for its requests (or cancels them), then frees it; once, however often asked. */
  unload(model: string, drain = true, reason: UnloadReason = 'admin'): Promise<UnloadResult> {
    const entry = this.models.get(model);
    if (!entry) return Promise.reject(new CortexError('not_found', `${model} is not loaded on ${this.workerId}`));
    entry.unloading ??= this.doUnload(entry, drain, reason);
    return entry.unloading;
  }

  private async doUnload(entry: ModelEntry, drain: boolean, reason: UnloadReason): Promise<UnloadResult> {
    const model = entry.id;
    if (entry.loading) await entry.loading.catch(() => undefined);
    entry.state = 'unloading';
    void this.heartbeat();
    const mine = [...this.active.entries()].filter(([, a]) => a.model === model);
    if (!drain) for (const [id] of mine) this.cancel(id, `${model} is being unloaded`);
    // The model is no longer ready, so no request joins these while they finish.
    await Promise.allSettled(mine.map(([, request]) => request.done));
    await entry.model?.dispose();
    this.models.delete(model);
    this.logger.log(`${model}: unloaded${drain ? '' : ` (${mine.length} requests cancelled)`}`);
    const result: UnloadResult = { model, workerId: this.workerId, cancelled: drain ? 0 : mine.length, reason };
    this.publishEvent(Subjects.modelUnloaded, result, `${this.workerId}.${model}.unloaded.${Date.now()}`);
    this.cycles++;
    void this.heartbeat();
    void this.maybeDefrag();
    return result;
  }

  /**
   * A request ended: tell the routers soon rather than at the next beat, so placement and eviction
   * see the model idle. Requests ending together share one heartbeat.
   */
  private heartbeatSoon(): void {
    if (this.beatSoon) return;
    this.beatSoon = setTimeout(() => {
      this.beatSoon = null;
      void this.heartbeat();
    }, 20);
  }

  private beatSoon: NodeJS.Timeout | null = null;

  /** Lifecycle facts go to JetStream so metrics count them even if they start later. */
  private publishEvent(subject: string, payload: unknown, id: string): void {
    this.events.publish(subject, payload, id).catch((error: Error) => this.logger.warn(`could not record ${subject}: ${error.message}`));
  }

  private async heartbeat(): Promise<void> {
    if (this.bus.nc.isClosed()) return;
    try {
      const device = await this.engine.device();
      const beat: Heartbeat = {
        workerId: this.workerId,
        host: hostname(),
        pid: process.pid,
        startedAt: this.startedAt,
        sentAt: Date.now(),
        intervalMs: this.config.worker.heartbeatMs,
        draining: this.draining,
        device,
        memory: this.memory(device),
        models: [...this.models.values()].map((entry): LoadedModel => ({
          id: entry.id,
          state: entry.state,
          inFlight: entry.model?.inFlight ?? 0,
          queued: entry.model?.queued ?? 0,
          slots: entry.model?.slots ?? 0,
          lastUsedAt: entry.lastUsedAt,
          sizeBytes: entry.bytes || entry.model?.sizeBytes,
          capabilities: entry.model?.capabilities,
        })),
      };
      this.bus.publish(heartbeatSubject(this.workerId), beat);
    } catch (error) {
      this.logger.warn(`heartbeat failed: ${(error as Error).message}`);
    }
  }

  /** Drain: refuse new work, say so, let running requests finish (bounded), then free the backend. */
  async onApplicationShutdown(): Promise<void> {
    this.shuttingDown = true;
    if (this.heartbeatTimer) clearInterval(this.heartbeatTimer);
    if (this.watchTimer) clearInterval(this.watchTimer);
    if (this.beatSoon) clearTimeout(this.beatSoon);
    await this.heartbeat();
    const running = (): Promise<unknown> => Promise.allSettled([...this.active.values()].map((request) => request.done));
    const drained = await Promise.race([
      running().then(() => true),
      new Promise<false>((resolve) => setTimeout(() => resolve(false), 10_000).unref()),
    ]);
    if (!drained) {
      for (const id of this.active.keys()) this.cancel(id, 'worker shutting down');
      await running();
    }
    for (const entry of this.models.values()) await entry.model?.dispose();
    await this.engine.dispose();
  }
}

export function defaultWorkerId(config: CortexConfig, backend: string): string {
  if (config.worker.id) return config.worker.id;
  const host = hostname().replace(/[^A-Za-z0-9_-]/g, '-').slice(0, 40);
  return `${host}-${backend}${config.worker.device ?? ''}`;
}

