import { performance } from 'node:perf_hooks';
import type { KV, KvEntry } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import { ConfigError, modelEntry, parseModelEntry, type CortexConfig, type ModelConfig } from '@cortex/config';
import { Buckets, CortexError } from '@cortex/contracts';
import { CatalogueFacts } from './catalogue-facts.js';
import { casUpdate } from './kv-cas.js';
import { KvCatchUp } from './kv-catch-up.js';
import { watchKv } from './kv-watch.js';
import { openKv } from './replicas.js';

/** How long a name the bucket does not have is answered from memory (a change seen clears it sooner). */
const MISS_MS = 1_000;

/** What the bucket holds per model id: the model as written in YAML, or a mark that it was removed. */
type StoredModel = { model: Record<string, unknown>; updated_at: string } | { removed: true; updated_at: string };

/** Where a model of the catalogue comes from. */
export type ModelOrigin = 'config' | 'added' | 'changed';

/**
 * The model catalogue every router and gateway serves from: the config file's `models` as the seed,
 * then the `cortex_catalogue` bucket (with `nats.replicas` copies) on top — per model id, a stored
 * model replaces or adds to the seed and a removal mark hides it. The admin API and `cortex models
 * add|set|remove` write the bucket; every process watches it, so a change holds everywhere without a
 * restart, and a changed config file still seeds what nobody changed at run time. The same bucket
 * keeps each model's header facts under keys of their own (`facts`), written by a router.
 */
export class ModelCatalogue {
  private readonly seed = new Map<string, ModelConfig>();
  private readonly overlay = new Map<string, ModelConfig | null>();
  private byName = new Map<string, ModelConfig>();
  private list: ModelConfig[] = [];
  /** The last bucket revision applied per model, so the watch replaying a write seen already changes nothing. */
  private readonly revisions = new Map<string, number>();
  private readonly listeners = new Set<(id: string, model: ModelConfig | null) => void>();
  private stopWatch: (() => void) | null = null;
  /** Names the bucket did not have, until when (performance.now()); cleared by any change. */
  private readonly misses = new Map<string, number>();
  private readonly lookups = new Map<string, Promise<ModelConfig | undefined>>();
  private readonly catchUp: KvCatchUp;
  /** What workers read of each model's GGUF header, from the same bucket. */
  readonly facts: CatalogueFacts;

  private constructor(
    private readonly kv: KV,
    private readonly replicationMaxReplicas: number,
    seed: readonly ModelConfig[],
  ) {
    this.catchUp = new KvCatchUp(kv);
    this.facts = new CatalogueFacts(kv);
    for (const model of seed) this.seed.set(model.id, model);
    this.rebuild();
  }

  /** Reads the whole bucket before returning (so a model added at run time is known before serving), then watches it. */
  static async open(
    nc: NatsConnection,
    config: Pick<CortexConfig, 'models' | 'replication'>,
    onWatchError: (error: Error) => void = () => {},
  ): Promise<ModelCatalogue> {
    const kv = await openKv(nc, Buckets.catalogue, {
      history: 5,
      description: 'cortex: models added, changed or removed at run time (the config file seeds the rest)',
    });
    const catalogue = new ModelCatalogue(kv, config.replication.maxReplicas, config.models);
    for await (const key of await kv.keys()) {
      const entry = await kv.get(key);
      if (entry) catalogue.apply(entry, false);
    }
    catalogue.rebuild();
    catalogue.stopWatch = watchKv(kv, (entry) => catalogue.apply(entry, true), onWatchError, catalogue.catchUp);
    return catalogue;
  }

  close(): void {
    this.stopWatch?.();
  }

  /** Every model, config order first, then those added at run time in the order they were added. */
  models(): readonly ModelConfig[] {
    return this.list;
  }

  /** The model an id or alias names, if the catalogue has it. */
  find(name: string): ModelConfig | undefined {
    return this.byName.get(name);
  }

  /**
   * `find`, but for a name this process does not know, asked again once its watch holds every change
   * the bucket had (`KvCatchUp`, at most `MISS_MS`): a model added, or an alias given, a moment ago
   * through another router is served by the next request even before the watch would have brought it.
   * A name still unknown then is remembered for `MISS_MS` or until the next change this process sees,
   * whichever comes first, so a client asking for an unknown model costs no bucket request per
   * request; lookups of one name at once share one wait.
   */
  findFresh(name: string): Promise<ModelConfig | undefined> {
    const known = this.byName.get(name);
    if (known) return Promise.resolve(known);
    if ((this.misses.get(name) ?? -Infinity) > performance.now()) return Promise.resolve(undefined);
    let lookup = this.lookups.get(name);
    if (!lookup) {
      lookup = this.catchUp
        .caughtUp(MISS_MS)
        .then((caughtUp) => {
          const found = this.byName.get(name);
          // Unknown in a view that is current: a real miss. A view that could not catch up remembers nothing.
          if (!found && caughtUp) this.misses.set(name, performance.now() + MISS_MS);
          return found;
        })
        .finally(() => this.lookups.delete(name));
      this.lookups.set(name, lookup);
    }
    return lookup;
  }

  origin(id: string): ModelOrigin {
    if (!this.overlay.has(id)) return 'config';
    return this.seed.has(id) ? 'changed' : 'added';
  }

  /** Called with the model id and the model now (null: removed) after each change this process sees. */
  onChange(listener: (id: string, model: ModelConfig | null) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Adds a model (as written in YAML); one whose id or an alias is taken is refused, naming it. */
  async add(plain: unknown): Promise<ModelConfig> {
    const model = this.parse(plain, 'model');
    return this.write(model.id, (current) => {
      if (current)
        throw new CortexError(
          'invalid_request',
          `a model ${model.id} exists already; change it with \`cortex models set\` (PATCH /admin/models/${model.id}) or remove it first`,
          { param: 'id' },
        );
      this.assertNamesFree(model);
      return model;
    });
  }

  /** Changes fields of a model (a field set to null returns to its default); the id stays. */
  async set(id: string, patch: unknown): Promise<ModelConfig> {
    if (patch === null || typeof patch !== 'object' || Array.isArray(patch))
      throw new CortexError('invalid_request', 'the body must be an object of model fields to change', {
        param: 'body',
      });
    if ('id' in patch && (patch as { id: unknown }).id !== id)
      throw new CortexError(
        'invalid_request',
        `id: a model's id cannot change (${id}); add a model under the new id and remove this one`,
        { param: 'id' },
      );
    return this.write(id, (current) => {
      if (!current) throw notFound(id, this.list);
      const merged = Object.fromEntries(
        Object.entries({ ...modelEntry(current), ...patch }).filter(([, value]) => value !== null),
      );
      const model = this.parse(merged, `model ${id}`);
      this.assertNamesFree(model);
      return model;
    });
  }

  /** Removes a model from every router and gateway, and its header facts; returns what it was. */
  async remove(id: string): Promise<ModelConfig> {
    let removed: ModelConfig | undefined;
    await this.write(id, (current) => {
      if (!current) throw notFound(id, this.list);
      removed = current;
      return null;
    });
    // Best effort: facts left behind are only read for a model of that id and the same source.
    await this.facts.purge(id).catch(() => undefined);
    return removed!;
  }

  private parse(plain: unknown, where: string): ModelConfig {
    try {
      return parseModelEntry(plain, this.replicationMaxReplicas, where);
    } catch (error) {
      if (error instanceof ConfigError)
        throw new CortexError('invalid_request', error.message, { param: fieldOf(error.message) });
      throw error;
    }
  }

  private assertNamesFree(model: ModelConfig): void {
    for (const name of [model.id, ...(model.aliases ?? [])]) {
      const holder = this.byName.get(name);
      if (holder && holder.id !== model.id)
        throw new CortexError('invalid_request', `aliases: "${name}" already names the model ${holder.id}`, {
          param: 'aliases',
        });
    }
  }

  /** Reads the model's entry, applies `edit` to the model it holds now, and writes back with compare-and-set. */
  private async write(
    id: string,
    edit: (current: ModelConfig | undefined) => ModelConfig | null,
  ): Promise<ModelConfig> {
    const { result, revision } = await casUpdate(
      this.kv,
      entryKey(id),
      (entry) => {
        if (entry) this.apply(entry, true);
        const next = edit(this.overlay.has(id) ? (this.overlay.get(id) ?? undefined) : this.seed.get(id));
        const stored: StoredModel = next
          ? { model: modelEntry(next), updated_at: new Date().toISOString() }
          : { removed: true, updated_at: new Date().toISOString() };
        return { value: JSON.stringify(stored), result: { next, stored } };
      },
      `the model ${id} changed too often at once; try again`,
    );
    // Seen here at once; the watch brings the same entry again, which changes nothing.
    this.applyStored(id, result.stored, revision!, true);
    return result.next ?? this.seed.get(id)!;
  }

  private apply(entry: KvEntry, notify: boolean): void {
    if (this.facts.apply(entry)) return;
    const id = Buffer.from(entry.key, 'base64url').toString();
    if (entry.operation !== 'PUT') {
      // Purged by hand (`nats kv del`): the seed, if any, holds again.
      if ((this.revisions.get(id) ?? 0) >= entry.revision) return;
      this.revisions.set(id, entry.revision);
      this.overlay.delete(id);
      this.changed(id, notify);
      return;
    }
    let stored: StoredModel;
    try {
      stored = entry.json<StoredModel>();
    } catch {
      return;
    }
    this.applyStored(id, stored, entry.revision, notify);
  }

  private applyStored(id: string, stored: StoredModel, revision: number, notify: boolean): void {
    if ((this.revisions.get(id) ?? 0) >= revision) return;
    this.revisions.set(id, revision);
    if ('removed' in stored) this.overlay.set(id, null);
    else {
      try {
        this.overlay.set(id, parseModelEntry(stored.model, this.replicationMaxReplicas, `cortex_catalogue ${id}`));
      } catch {
        // Written by a newer cortex with fields this one does not know: keep what this process had.
        return;
      }
    }
    this.changed(id, notify);
  }

  private changed(id: string, notify: boolean): void {
    // A model added or an alias given may be a name remembered as missing (an id or any alias): forget them all.
    this.misses.clear();
    if (!notify) return;
    this.rebuild();
    const model = this.overlay.has(id) ? this.overlay.get(id)! : (this.seed.get(id) ?? null);
    for (const listener of this.listeners) listener(id, model);
  }

  private rebuild(): void {
    const list: ModelConfig[] = [];
    for (const [id, model] of this.seed) {
      const now = this.overlay.has(id) ? this.overlay.get(id) : model;
      if (now) list.push(now);
    }
    for (const [id, model] of this.overlay) if (model && !this.seed.has(id)) list.push(model);
    const byName = new Map<string, ModelConfig>();
    for (const model of list)
      for (const name of [model.id, ...(model.aliases ?? [])]) if (!byName.has(name)) byName.set(name, model);
    this.list = list;
    this.byName = byName;
  }
}

const entryKey = (id: string): string => Buffer.from(id).toString('base64url');

function notFound(id: string, models: readonly ModelConfig[]): CortexError {
  return new CortexError(
    'model_not_found',
    `The model '${id}' does not exist; available: ${models.map((m) => m.id).join(', ') || 'none'}`,
    { param: 'model' },
  );
}

/** The snake_case field a config error names first (`model x.context_size: …` → `context_size`). */
function fieldOf(message: string): string {
  return /\.([a-z_]+)(?:\[\d+\])?:/.exec(message)?.[1] ?? /: ([a-z_]+):/.exec(message)?.[1] ?? 'body';
}
