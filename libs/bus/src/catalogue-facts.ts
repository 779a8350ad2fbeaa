import type { KV, KvEntry } from '@nats-io/kv';
import { decodeStoredFacts, factsKey, factsKeyId, type StoredFacts } from '@cortex/contracts';
import { casUpdate } from './kv-cas.js';

/** Attempts at a facts write that keeps losing to others: each loss means another router wrote it, which is enough. */
const FACTS_WRITE_ATTEMPTS = 3;

/**
 * The models' header facts kept in the catalogue bucket beside the models (`facts.<id>` keys, see
 * `StoredFacts`), as the catalogue's watch delivers them. The model entries and their facts are
 * separate keys so that a router writing facts never races an operator editing the model.
 */
export class CatalogueFacts {
  private readonly byId = new Map<string, { stored: StoredFacts; revision: number }>();
  private readonly listeners = new Set<(id: string) => void>();

  constructor(private readonly kv: KV) {}

  /** The facts record of a model, as this process last saw it. */
  get(id: string): StoredFacts | undefined {
    return this.byId.get(id)?.stored;
  }

  /** Called with the model id after each facts record this process sees change. */
  onChange(listener: (id: string) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Applies an entry of the bucket; false when the key is not a facts key (a model's own entry). */
  apply(entry: KvEntry): boolean {
    const id = factsKeyId(entry.key);
    if (id === undefined) return false;
    if ((this.byId.get(id)?.revision ?? 0) >= entry.revision) return true;
    if (entry.operation !== 'PUT') {
      this.byId.delete(id);
    } else {
      try {
        this.byId.set(id, { stored: decodeStoredFacts(entry.json()), revision: entry.revision });
      } catch {
        // Written by a newer cortex in a shape this one does not read, or by hand: keep what this process had.
        return true;
      }
    }
    for (const listener of this.listeners) listener(id);
    return true;
  }

  /** The record the bucket holds now, read past the watch (which may lag a write another process just made). */
  async fresh(id: string): Promise<StoredFacts | undefined> {
    const entry = await this.kv.get(factsKey(id));
    return entry && entry.operation === 'PUT' ? readable(entry) : undefined;
  }

  /**
   * Writes the model's facts with compare-and-set: `edit` sees the record the bucket holds now (not
   * this process's view, which may lag) and returns the record to write, or undefined to leave it.
   * Returns whether this call wrote; losing every attempt to other writers is not an error.
   */
  async write(id: string, edit: (current: StoredFacts | undefined) => StoredFacts | undefined): Promise<boolean> {
    try {
      const { result, revision } = await casUpdate(
        this.kv,
        factsKey(id),
        (entry) => {
          const next = edit(entry && entry.operation === 'PUT' ? readable(entry) : undefined);
          return next ? { value: JSON.stringify(next), result: next } : { result: undefined };
        },
        `the facts of ${id} changed too often at once`,
        { attempts: FACTS_WRITE_ATTEMPTS },
      );
      if (!result || revision === null) return false;
      // Seen here at once; the watch brings the same entry again, which changes nothing.
      if ((this.byId.get(id)?.revision ?? 0) < revision) {
        this.byId.set(id, { stored: result, revision });
        for (const listener of this.listeners) listener(id);
      }
      return true;
    } catch (error) {
      if ((error as { code?: string }).code === 'service_unavailable') return false;
      throw error;
    }
  }

  /** Forgets the model's facts in the bucket (the model was removed); a record that is not there is no error. */
  async purge(id: string): Promise<void> {
    await this.kv.purge(factsKey(id));
  }
}

/** A stored record, or undefined for one this cortex cannot read (written anew by the next read). */
function readable(entry: KvEntry): StoredFacts | undefined {
  try {
    return decodeStoredFacts(entry.json());
  } catch {
    return undefined;
  }
}
