import type { Subscription } from '@nats-io/transport-node';
import type { BusClient } from '@cortex/bus';
import { decodeLoadProgress, Subjects, type LoadProgress } from '@cortex/contracts';

/**
 * The progress of the cold loads requests wait for: one bus subscription feeds every request that
 * watches a model (by catalogue id; `resolve` turns the name a request used, an alias, into it).
 */
export class LoadProgressWatch {
  private readonly watchers = new Map<string, Set<(progress: LoadProgress) => void>>();
  private readonly sub: Subscription;

  constructor(
    bus: BusClient,
    private readonly resolve: (name: string) => string,
  ) {
    this.sub = bus.subscribe(Subjects.modelProgressed, (data) => {
      const event = decodeLoadProgress(data);
      for (const watcher of this.watchers.get(event.model) ?? []) watcher(event);
    });
  }

  /** Calls `watcher` with each load progress event of the model `name` (id or alias) until the returned stop. */
  watch(name: string, watcher: (progress: LoadProgress) => void): () => void {
    const model = this.resolve(name);
    const watchers = this.watchers.get(model) ?? new Set();
    this.watchers.set(model, watchers.add(watcher));
    return () => {
      watchers.delete(watcher);
      if (watchers.size === 0 && this.watchers.get(model) === watchers) this.watchers.delete(model);
    };
  }

  close(): void {
    this.sub.unsubscribe();
  }
}
