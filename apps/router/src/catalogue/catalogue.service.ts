import { Inject, Injectable, type OnModuleDestroy } from '@nestjs/common';
import { CONFIG, modelSource, type CortexConfig, type ModelConfig, type ModelSource } from '@cortex/config';
import { ModelCatalogue } from '@cortex/bus';
import { CortexError, type CatalogueEntry, type ModelCapabilities, type ModelFacts } from '@cortex/contracts';
import { FleetRegistry } from '../fleet/fleet.registry.js';
import { PinStore } from '../placement/pin.store.js';
import type { ModelPolicy, ReplicaPolicy } from '../placement/planner.js';

/** The catalogue's models by id and alias, what placement weighs of each, and the catalogue clients list. */
@Injectable()
export class CatalogueService implements OnModuleDestroy {
  /** Capabilities a worker reported for a model, remembered after it is unloaded. */
  private readonly capabilities = new Map<string, ModelCapabilities>();
  /** The model's memory need as a worker estimated it from the GGUF header, per model. */
  private readonly estimates = new Map<string, number>();
  /** What a worker read of the model's GGUF header when it estimated it (before any download), per model. */
  private readonly facts = new Map<string, ModelFacts>();
  /** How long the model's last load through this router took, per model. */
  private readonly loadTimes = new Map<string, number>();
  private readonly created = Math.floor(Date.now() / 1000);

  constructor(
    @Inject(CONFIG) private readonly config: CortexConfig,
    private readonly fleet: FleetRegistry,
    private readonly pins: PinStore,
    readonly store: ModelCatalogue,
  ) {}

  onModuleDestroy(): void {
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

  isPinned(model: ModelConfig): boolean {
    return this.pins.isPinned(model.id, model.pinned);
  }

  /** What eviction weighs of a model (one a worker reports but the config lacks: unpinned, priority 0). */
  policy(modelId: string): ModelPolicy {
    const model = this.store.find(modelId);
    return {
      pinned: this.pins.isPinned(modelId, model?.pinned ?? false),
      priority: model?.priority ?? 0,
      estimate: this.estimates.get(modelId),
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
    return this.estimates.get(modelId);
  }

  rememberEstimate(modelId: string, bytes: number, facts?: ModelFacts): void {
    this.estimates.set(modelId, bytes);
    if (facts) this.facts.set(modelId, facts);
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
          })),
      );
      const reported = held.find((m) => m.id === model.id && m.capabilities)?.capabilities;
      if (reported) this.capabilities.set(model.id, reported);
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
        capabilities: this.capabilities.get(model.id) ?? null,
        kind: model.kind,
        ...(model.sampling && { sampling: { ...model.sampling } }),
      };
      const facts = this.facts.get(model.id);
      if (facts) entry.facts = facts;
      entries.push(entry, ...(model.aliases ?? []).map((alias) => ({ ...entry, id: alias })));
    }
    return entries;
  }
}
