import { Inject, Injectable, Logger, type OnModuleDestroy } from '@nestjs/common';
import { CONFIG, modelSource, type CortexConfig, type ModelConfig, type ModelSource } from '@cortex/config';
import { ModelCatalogue } from '@cortex/bus';
import {
  CortexError,
  factsSource,
  type CatalogueEntry,
  type ModelCapabilities,
  type ModelFacts,
  type StoredFacts,
  upstreamHost,
} from '@cortex/contracts';
import { FleetRegistry } from '../fleet/fleet.registry.js';
import { PinStore } from '../placement/pin.store.js';
import type { ModelPolicy } from '../placement/planner.js';
import type { ReplicaPolicy } from '../placement/replica.planner.js';
import { afterRead } from './facts.decider.js';
import { beforeLoad } from './capabilities.decider.js';

/** The catalogue's models by id and alias, what placement weighs of each, and the catalogue clients list. */
@Injectable()
export class CatalogueService implements OnModuleDestroy {
  private readonly logger = new Logger('catalogue');
  /** Capabilities a worker reported for a model, remembered after it is unloaded. */
  private readonly capabilities = new Map<string, ModelCapabilities>();
  /**
   * Estimates this router's own loads asked for, per model, with the source they were read for: the
   * answer while the catalogue bucket does not have it (its write failed, or has not come back yet).
   */
  private readonly estimates = new Map<string, { source: string; bytes: number; facts?: ModelFacts }>();
  /** How long the model's last load through this router took, per model. */
  private readonly loadTimes = new Map<string, number>();
  /** Each model's `factsSource`, made once per version of the catalogue (a draft's file is another model's). */
  private sources = new WeakMap<ModelConfig, string>();
  private readonly stopWatch: () => void;
  private readonly created = Math.floor(Date.now() / 1000);

  constructor(
    @Inject(CONFIG) private readonly config: CortexConfig,
    private readonly fleet: FleetRegistry,
    private readonly pins: PinStore,
    readonly store: ModelCatalogue,
  ) {
    this.stopWatch = store.onChange(() => (this.sources = new WeakMap()));
  }

  onModuleDestroy(): void {
    this.stopWatch();
    this.store.close();
  }

  /** The catalogue model for an id or alias; unknown → `model_not_found` naming the known ones. */
  model(name: string): ModelConfig {
    const model = this.store.find(name);
    if (!model) {
      const known =
        this.store
          .models()
          .map((m) => m.id)
          .join(', ') || 'none';
      throw new CortexError('model_not_found', `The model '${name}' does not exist; available: ${known}`, {
        param: 'model',
      });
    }
    return model;
  }

  /** `model`, after looking in the bucket for a name this router has not heard of (added a moment ago elsewhere). */
  async modelFresh(name: string): Promise<ModelConfig> {
    await this.store.findFresh(name);
    return this.model(name);
  }

  models(): readonly ModelConfig[] {
    return this.store.models();
  }

  /** What a worker needs to estimate or load the model (a draft named by id is that model's file). */
  source(model: ModelConfig): ModelSource {
    return modelSource({ models: [...this.store.models()] }, model);
  }

  /** What the model's estimate depends on, as the facts record names it. */
  factsSourceOf(model: ModelConfig): string {
    let source = this.sources.get(model);
    if (source === undefined) {
      source = factsSource(this.source(model));
      this.sources.set(model, source);
    }
    return source;
  }

  /**
   * The model's header facts and memory estimate for its current source: the catalogue bucket's
   * (read when the model entered the catalogue, by whichever router did), else this router's own.
   */
  factsOf(model: ModelConfig): { bytes?: number; facts?: ModelFacts; error?: string } {
    // An upstream model takes no memory here and has no header to read.
    if (model.upstream) return { bytes: 0 };
    const source = this.factsSourceOf(model);
    const stored: StoredFacts | undefined = this.store.facts.get(model.id);
    if (stored?.source === source && stored.bytes !== undefined && stored.error === undefined)
      return { bytes: stored.bytes, ...(stored.facts && { facts: stored.facts }) };
    const own = this.estimates.get(model.id);
    if (own?.source === source) return { bytes: own.bytes, ...(own.facts && { facts: own.facts }) };
    return stored?.source === source && stored.error !== undefined ? { error: stored.error } : {};
  }

  isPinned(model: ModelConfig): boolean {
    return this.pins.isPinned(model.id, model.pinned);
  }

  /** What eviction weighs of a model (one a worker reports but the config lacks: unpinned, priority 0). */
  policy(modelId: string): ModelPolicy {
    const model = this.store.find(modelId);
    return {
      pinned: this.pins.isPinned(modelId, model?.pinned ?? false),
      priority: model?.priority ?? 0,
      estimate: this.estimate(modelId),
      minReplicas: model?.minReplicas ?? 1,
    };
  }

  /** What replication weighs of a model: its copy bounds, priority, own workers and measured load time. */
  replicaPolicy(model: ModelConfig): ReplicaPolicy {
    const loadMs = this.loadTimes.get(model.id);
    return {
      id: model.id,
      priority: model.priority,
      minReplicas: model.minReplicas,
      maxReplicas: model.maxReplicas ?? this.config.replication.maxReplicas,
      ...(loadMs !== undefined && { loadMs }),
      ...(model.workers && { workers: model.workers }),
    };
  }

  rememberLoadTime(modelId: string, ms: number): void {
    this.loadTimes.set(modelId, ms);
  }

  /** Idle TTL in seconds, the model's own or `eviction.idle_ttl`. */
  idleTtl(modelId: string): number {
    return this.store.find(modelId)?.idleTtl ?? this.config.eviction.idleTtl;
  }

  estimate(modelId: string): number | undefined {
    const model = this.store.find(modelId);
    return model ? this.factsOf(model).bytes : undefined;
  }

  /**
   * A worker's estimate for one of this router's loads: used at once, and written to the catalogue
   * bucket for every router where the bucket lacks it (a model whose first read failed, then worked).
   */
  rememberEstimate(modelId: string, bytes: number, facts?: ModelFacts): void {
    const model = this.store.find(modelId);
    if (!model) return;
    const source = this.factsSourceOf(model);
    this.estimates.set(modelId, { source, bytes, ...(facts && { facts }) });
    this.store.facts
      .write(modelId, (current) => afterRead(current, source, { bytes, ...(facts && { facts }) }, Date.now()))
      .catch((error: Error) => this.logger.warn(`could not keep the facts of ${modelId}: ${error.message}`));
  }

  catalogue(): CatalogueEntry[] {
    const workers = this.fleet.available();
    const entries: CatalogueEntry[] = [];
    const held = workers.flatMap((w) => w.models);
    for (const model of this.store.models()) {
      const locations = workers.flatMap((w) =>
        w.models
          .filter((m) => m.id === model.id)
          .map((m) => ({
            workerId: w.workerId,
            state: m.state,
            inFlight: m.inFlight,
            queued: m.queued,
            ...(m.download && { download: m.download }),
            ...(m.unreachable && { unreachable: m.unreachable }),
          })),
      );
      const reported = held.find((m) => m.id === model.id && m.capabilities)?.capabilities;
      if (reported) this.capabilities.set(model.id, reported);
      const { bytes, facts, error } = this.factsOf(model);
      const entry: CatalogueEntry = {
        id: model.id,
        ownedBy: model.ownedBy,
        created: this.created,
        contextSize: model.contextSize,
        pinned: this.isPinned(model),
        priority: model.priority,
        loaded: locations.some((l) => l.state === 'ready'),
        locations,
        replicas: {
          ready: locations.filter((l) => l.state === 'ready').length,
          min: model.minReplicas,
          max: model.maxReplicas ?? this.config.replication.maxReplicas,
        },
        capabilities: this.capabilities.get(model.id) ?? beforeLoad(model, facts),
        kind: model.kind,
        ...(model.sampling && { sampling: { ...model.sampling } }),
        ...(model.upstream && { upstream: { api: model.upstream.api, host: upstreamHost(model.upstream.url) } }),
        ...(model.fallback?.length && { fallback: [...model.fallback] }),
      };
      if (facts) entry.facts = facts;
      if (bytes !== undefined) entry.memoryBytes = bytes;
      if (error !== undefined) entry.factsError = error;
      entries.push(entry, ...(model.aliases ?? []).map((alias) => ({ ...entry, id: alias })));
    }
    return entries;
  }
}
