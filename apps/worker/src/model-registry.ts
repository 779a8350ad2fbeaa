import { performance } from 'node:perf_hooks';
import type { Logger } from '@nestjs/common';
import {
  CortexError,
  mib,
  Subjects,
  workerEventSubject,
  type WorkerEvent,
  type DefragEvent,
  type EstimateCommand,
  type EstimateReply,
  type PullCommand,
  type PullResult,
  type LoadCommand,
  type LoadedModel,
  type LoadFailedEvent,
  type LoadProgress,
  type LoadTrigger,
  type LoadResult,
  type MemoryInfo,
  type UnloadReason,
  type UnloadResult,
} from '@cortex/contracts';
import { EventPublisher, type BusClient } from '@cortex/bus';
import type { CortexConfig } from '@cortex/config';
import type { Engine, EngineModel } from './engine/index.js';
import type { Device, HeartbeatSource } from './heartbeat.js';
import { ModelFiles } from './model-files.js';
import {
  loadAction,
  nextModelState,
  unloadAction,
  type LoadingEntry,
  type ModelEntry,
  type ModelEvent,
  type UnloadingEntry,
} from './model-state.js';

/** A loaded model as a request sees it. */
export interface ReadyModel {
  readonly id: string;
  readonly model: EngineModel;
  /** Marks it used now: eviction picks the least recently used. */
  touch(): void;
}

/** The runs an unload or a defragmentation must wait for (or cancel). */
export interface RunningRequests {
  readonly size: number;
  /** The runs on one model, each with the promise that settles when its sequence is free. */
  onModel(model: string): { runId: string; done: Promise<void> }[];
  cancel(runId: string, reason: string): boolean;
}

export interface RegistryDeps {
  config: CortexConfig;
  engine: Engine;
  workerId: string;
  bus: BusClient;
  logger: Logger;
  runs: RunningRequests;
  /** Publishes a heartbeat now, so routers see a state change without waiting for the next beat. */
  beat: () => Promise<void>;
}

/**
 * The worker's models: loads (refused when they would not fit), unloads (draining or cancelling
 * their runs), the memory budget, and defragmentation (recreating the backend after many cycles).
 * It also says whether the worker is draining, which the heartbeat reports.
 */
export class ModelRegistry implements HeartbeatSource {
  private readonly models = new Map<string, ModelEntry>();
  private readonly events: EventPublisher;
  private shuttingDown = false;
  /** Load/unload cycles since the backend was (re)created; `eviction.defrag_after_cycles` acts on it. */
  private cycles = 0;
  private defragging = false;
  /** The models' sources, downloads and estimates. */
  private readonly files: ModelFiles;

  constructor(private readonly deps: RegistryDeps) {
    this.events = new EventPublisher(deps.bus.nc);
    this.files = new ModelFiles(deps, (progress, trigger) => this.publishProgress(progress, trigger));
  }

  /** Refusing new work: shutting down, or recreating the backend (a defrag ending must not undo a shutdown). */
  get draining(): boolean {
    return this.shuttingDown || this.defragging;
  }

  /** From now on the worker refuses new work, for good. */
  shutDown(): void {
    this.shuttingDown = true;
  }

  /**
   * Moves a model to its next state (see nextModelState): the entry that replaces `from`, or none
   * when it is gone. A move the state machine does not allow is a bug, thrown as such.
   */
  private move(from: ModelEntry | undefined, event: ModelEvent, to: ModelEntry | null): void {
    const id = to?.id ?? from?.id ?? '';
    const next = nextModelState(from?.state ?? 'absent', event);
    if (next === null || next !== (to?.state ?? 'absent'))
      throw new Error(`${id}: ${event} cannot happen while it is ${from?.state ?? 'absent'}`);
    // A stale entry (replaced meanwhile) changes nothing.
    if (from && this.models.get(id) !== from) return;
    if (to) this.models.set(id, to);
    else this.models.delete(id);
  }

  /** A model ready to serve, or a `model_not_ready` error that says what state it is in. */
  ready(model: string): ReadyModel {
    const entry = this.models.get(model);
    if (entry?.state !== 'ready') {
      throw new CortexError(
        'model_not_ready',
        `model ${model} is ${entry ? entry.state : 'not loaded'} on ${this.deps.workerId}`,
        { retryAfter: 1 },
      );
    }
    const touch = (): void => {
      entry.lastUsedAt = Date.now();
    };
    return { id: entry.id, model: entry.model, touch };
  }

  /** For `cortex status`: each model and its state. */
  describe(): string {
    return [...this.models.values()].map((m) => `${m.id} ${m.state}`).join(', ');
  }

  /** Loads a model once; concurrent loads of the same model share one promise. */
  load(command: LoadCommand): Promise<LoadResult> {
    const { workerId } = this.deps;
    if (this.draining)
      return Promise.reject(
        new CortexError('service_unavailable', `worker ${workerId} is draining`, { retryAfter: 1 }),
      );
    const action = loadAction(this.models.get(command.model));
    switch (action.action) {
      case 'ready':
        return Promise.resolve({ model: command.model, workerId, loadMs: 0, sizeBytes: action.entry.bytes });
      case 'join':
        return action.entry.loading;
      case 'after_unload':
        return action.entry.unloading.then(
          () => this.load(command),
          () => this.load(command),
        );
      case 'start':
        break;
    }
    // In place before the load's first step runs: its promise follows the load once that starts.
    const { promise: loading, follow } = following<LoadResult>();
    const entry: LoadingEntry = {
      id: command.model,
      state: 'loading',
      loading,
      abort: new AbortController(),
      unloadAfter: null,
      lastUsedAt: Date.now(),
      bytes: 0,
    };
    this.move(undefined, 'load', entry);
    follow(this.doLoad(command, entry));
    void this.deps.beat();
    return loading;
  }

  /** Stops a load in progress; false when the model is not loading here. */
  cancelLoad(model: string, reason: string): boolean {
    const entry = this.models.get(model);
    if (entry?.state !== 'loading') return false;
    this.deps.logger.log(`${model}: cancelling its load (${reason})`);
    entry.abort.abort(
      new CortexError('model_load_failed', `the load of ${model} on ${this.deps.workerId} was cancelled (${reason})`),
    );
    return true;
  }

  private async doLoad(command: LoadCommand, entry: LoadingEntry): Promise<LoadResult> {
    const { config, engine, workerId, logger } = this.deps;
    const started = performance.now();
    const log = (line: string): void =>
      logger.log(`${command.model}: ${line}${command.trigger ? ` (${command.trigger})` : ''}`);
    const signal = entry.abort.signal;
    const loading = (steps: number): ((fraction: number) => void) => {
      let last = -1;
      return (fraction) => {
        const step = Math.floor(fraction * steps);
        if (step <= last) return;
        last = step;
        log(`loading ${Math.round(fraction * 100)}%`);
        this.publishProgress({ model: command.model, fraction, phase: 'loading' }, command.trigger);
      };
    };
    try {
      // A first word at once: the console shows the load, and why, before any progress.
      loading(1)(0);
      const { path, draft, mmproj, bytes } = await this.files.resolve(command, log, signal);
      signal?.throwIfAborted();
      entry.bytes = bytes;
      await this.assertFits(command.model, entry.bytes);
      const model = await engine.load(
        {
          id: command.model,
          path,
          contextSize: command.contextSize,
          slots: command.slots,
          maxQueue: config.worker.maxQueue,
          queueOrder: config.worker.queueOrder,
          ...(draft && { draft }),
          ...(mmproj && { mmproj }),
          ...(command.kind && { kind: command.kind }),
          ...(command.chatTemplate && { chatTemplate: command.chatTemplate }),
          ...(command.format && { format: command.format }),
          ...(command.upstream && { upstream: command.upstream }),
        },
        loading(4),
        signal,
      );
      if (signal?.aborted) {
        // Aborted as it ended: what was loaded is given back.
        await model.dispose();
        signal.throwIfAborted();
      }
      this.move(entry, 'loaded', {
        id: entry.id,
        state: 'ready',
        model,
        lastUsedAt: entry.lastUsedAt,
        bytes: entry.bytes,
      });
      const result: LoadResult = {
        model: command.model,
        workerId,
        loadMs: performance.now() - started,
        sizeBytes: entry.bytes,
      };
      const format = model.format ? `, format ${model.format}` : '';
      log(`ready in ${Math.round(result.loadMs)} ms (${model.slots} slots${format})`);
      // The routers hear of the change before anyone hears the event: a gateway that drops its reused
      // placements on the event and asks again gets an answer from the new view.
      await this.deps.beat();
      void this.publishEvent(Subjects.modelLoaded, result, `${workerId}.${command.model}.loaded.${Date.now()}`);
      return result;
    } catch (failure) {
      // A cancelled load fails with the reason it was given, whatever the backend threw on the abort.
      const error = signal?.aborted ? (signal.reason as Error) : failure;
      // A failed load leaves nothing behind: the model is simply not there; load_failed says why.
      const message = (error as Error).message;
      this.move(entry, 'load_failed', null);
      logger.error(`${command.model}: load failed: ${message}`);
      const failed: LoadFailedEvent = {
        workerId,
        at: Date.now(),
        model: command.model,
        error: message,
        ...(signal?.aborted && { cancelled: true }),
      };
      const recorded = this.publishEvent(
        Subjects.modelLoadFailed,
        failed,
        `${workerId}.${command.model}.failed.${failed.at}`,
      );
      // Routers drop the requests that waited on a cancelled load when they hear this event: it must
      // reach them before this load's answer, or a waiting request could take the lease and load again.
      if (failed.cancelled) await recorded;
      void this.deps.beat();
      throw error instanceof CortexError
        ? error
        : new CortexError('model_load_failed', `loading ${command.model} failed: ${message}`, { cause: error });
    }
  }

  /** Memory the worker may still give to models: device free memory, capped by the budget. */
  memory(device: { freeBytes: number }, except?: string): MemoryInfo {
    const used = [...this.models.values()].filter((m) => m.id !== except).reduce((sum, m) => sum + m.bytes, 0);
    const budget = this.deps.config.worker.memoryBudget;
    const promptCache = this.deps.engine.promptCacheUse?.() ?? [];
    return {
      budgetBytes: budget,
      usedBytes: used,
      freeBytes: Math.max(0, budget > 0 ? Math.min(device.freeBytes, budget - used) : device.freeBytes),
      ...(promptCache.length > 0 && { promptCache }),
    };
  }

  device(): Promise<Device> {
    return this.deps.engine.device();
  }

  /** The models as a heartbeat reports them. */
  loaded(): LoadedModel[] {
    return [...this.models.values()].map((entry) => {
      const model = entry.state === 'loading' ? null : entry.model;
      const download = this.files.download(entry.id);
      return {
        id: entry.id,
        state: entry.state,
        inFlight: model?.inFlight ?? 0,
        queued: model?.queued ?? 0,
        slots: model?.slots ?? 0,
        lastUsedAt: entry.lastUsedAt,
        sizeBytes: entry.bytes || model?.sizeBytes,
        capabilities: model?.capabilities,
        ...(download && { download }),
        ...(model?.unreachable && { unreachable: model.unreachable }),
      };
    });
  }

  /**
   * The memory a model would take and what its header says, without fetching its weights (see
   * ModelFiles.estimate).
   */
  estimate(command: EstimateCommand): Promise<EstimateReply> {
    return this.files.estimate(command);
  }

  /** Downloads a model's file ahead of a load (`cortex pull --worker|--all`; see ModelFiles.pull). */
  pull(command: PullCommand): Promise<PullResult> {
    return this.files.pull(command);
  }

  private publishProgress(
    progress: Omit<LoadProgress, 'workerId' | 'trigger'>,
    trigger: LoadTrigger | undefined,
  ): void {
    const event: LoadProgress = { workerId: this.deps.workerId, ...progress, ...(trigger && { trigger }) };
    this.deps.bus.publish(Subjects.modelProgressed, event);
  }

  /**
   * After `defrag_after_cycles` load/unload cycles, once no request is running: drop every model,
   * dispose the backend and create it anew, so memory fragmented by the cycles comes back whole. The
   * worker drains (refuses new work) meanwhile; routers reload its pinned models when it is back.
   */
  async maybeDefrag(): Promise<void> {
    const { config, engine, workerId, logger } = this.deps;
    const after = config.eviction.defragAfterCycles;
    if (after <= 0 || this.cycles < after || this.draining) return;
    // Not while another model is still loading or being unloaded (unloads may run side by side).
    if (this.deps.runs.size > 0 || [...this.models.values()].some((m) => m.state !== 'ready')) return;
    this.defragging = true;
    await this.deps.beat();
    const dropped = [...this.models.keys()];
    try {
      logger.log({
        msg:
          `defragmenting after ${this.cycles} load/unload cycles: dropping ` +
          `${dropped.join(', ') || 'no models'} and recreating the backend`,
        cycles: this.cycles,
      });
      await this.disposeAll();
      this.models.clear();
      await engine.restart();
      const event: DefragEvent = { workerId, at: Date.now(), cycles: this.cycles, dropped };
      void this.publishEvent(Subjects.workerDefragmented, event, `${workerId}.defrag.${event.at}`);
      this.cycles = 0;
    } catch (error) {
      logger.error(`defragmentation failed: ${(error as Error).message}`);
    } finally {
      this.defragging = false;
      void this.deps.beat();
    }
  }

  /** Refuses, with the numbers, a load that would not fit the device or the configured budget. */
  private async assertFits(model: string, bytes: number): Promise<void> {
    const device = await this.deps.engine.device();
    const { usedBytes: others, freeBytes: free } = this.memory(device, model);
    const budget = this.deps.config.worker.memoryBudget;
    if (bytes > free) {
      const where = budget > 0 ? `of a ${mib(budget)} budget with ${mib(others)} in use` : `free on ${device.name}`;
      throw new CortexError(
        'insufficient_memory',
        `${model} needs about ${mib(bytes)} but only ` +
          `${mib(Math.max(0, free))} is ${where}; unload a model, ` +
          'raise worker.memory_budget, or use a smaller context_size/slots',
      );
    }
  }

  /** Stops serving a model: waits for its requests (or cancels them), then frees it; once, however often asked. */
  unload(model: string, drain = true, reason: UnloadReason = 'admin'): Promise<UnloadResult> {
    const action = unloadAction(this.models.get(model));
    switch (action.action) {
      case 'not_found':
        return Promise.reject(new CortexError('not_found', `${model} is not loaded on ${this.deps.workerId}`));
      case 'join':
        return action.unloading;
      case 'after_load': {
        const loading = action.entry;
        // Once the load ends: unloaded if it loaded, nothing to do if it failed.
        loading.unloadAfter = loading.loading.then(
          () => this.unload(model, drain, reason),
          (): UnloadResult => ({ model, workerId: this.deps.workerId, cancelled: 0, reason }),
        );
        return loading.unloadAfter;
      }
      case 'start': {
        const ready = action.entry;
        // In place before the unload's first step runs: its promise follows the unload once that starts.
        const { promise, follow } = following<UnloadResult>();
        const unloading: UnloadingEntry = {
          id: model,
          state: 'unloading',
          model: ready.model,
          lastUsedAt: ready.lastUsedAt,
          bytes: ready.bytes,
          unloading: promise,
        };
        this.move(ready, 'unload', unloading);
        follow(this.doUnload(unloading, drain, reason));
        return promise;
      }
    }
  }

  private async doUnload(entry: UnloadingEntry, drain: boolean, reason: UnloadReason): Promise<UnloadResult> {
    const { workerId, logger, runs } = this.deps;
    const model = entry.id;
    void this.deps.beat();
    const mine = runs.onModel(model);
    if (!drain) for (const { runId } of mine) runs.cancel(runId, `${model} is being unloaded`);
    // The model is no longer ready, so no request joins these while they finish.
    await Promise.allSettled(mine.map((run) => run.done));
    await entry.model.dispose();
    this.move(entry, 'unloaded', null);
    logger.log(`${model}: unloaded${drain ? '' : ` (${mine.length} requests cancelled)`}`);
    const result: UnloadResult = { model, workerId, cancelled: drain ? 0 : mine.length, reason };
    // As after a load: the routers' view changes before the event goes out.
    await this.deps.beat();
    void this.publishEvent(Subjects.modelUnloaded, result, `${workerId}.${model}.unloaded.${Date.now()}`);
    this.cycles++;
    void this.maybeDefrag();
    return result;
  }

  /** Frees every model (defragmentation, shutdown). */
  async disposeAll(): Promise<void> {
    for (const entry of this.models.values()) if (entry.state !== 'loading') await entry.model.dispose();
  }

  /**
   * Lifecycle facts go to JetStream so metrics count them even if they start later; each under this worker's id (see
   * workerEventSubject).
   */
  private publishEvent(event: WorkerEvent, payload: unknown, id: string): Promise<void> {
    const subject = workerEventSubject(event, this.deps.workerId);
    return this.events.publish(subject, payload, id).then(
      () => undefined,
      (error: Error) => this.deps.logger.warn(`could not record ${subject}: ${error.message}`),
    );
  }
}

/** A promise made now that settles as the one handed to `follow` later does (an entry holds it before its work starts). */
function following<T>(): { promise: Promise<T>; follow: (work: Promise<T>) => void } {
  let follow: (work: Promise<T>) => void = () => undefined;
  const promise = new Promise<T>((resolve) => (follow = resolve));
  return { promise, follow };
}
