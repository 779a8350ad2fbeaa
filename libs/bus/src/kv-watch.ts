import type { KV, KvWatchEntry } from '@nats-io/kv';
import type { KvCatchUp } from './kv-catch-up.js';

/**
 * Keeps a local view of a KV bucket: `onEntry` gets every current entry, then every change (puts and
 * deletes alike; see `entry.operation`). A watch that ends unexpectedly (the bus went away) is opened
 * again after a second, which replays the current entries. With `catchUp`, each entry is reported to
 * it once `onEntry` has applied it, so a lookup can wait for the view to hold the bucket's last change.
 * Returns a function that stops watching.
 */
export function watchKv(
  kv: KV,
  onEntry: (entry: KvWatchEntry) => void,
  onError: (error: Error) => void,
  catchUp?: KvCatchUp,
): () => void {
  let stopped = false;
  let stopCurrent: (() => void) | null = null;
  void (async () => {
    while (!stopped) {
      try {
        const watch = await kv.watch();
        stopCurrent = () => watch.stop();
        if (stopped) watch.stop();
        for await (const entry of watch) {
          onEntry(entry);
          catchUp?.saw(entry.revision);
        }
      } catch (error) {
        onError(error as Error);
      }
      if (!stopped) await new Promise((done) => setTimeout(done, 1_000).unref());
    }
  })();
  return () => {
    stopped = true;
    stopCurrent?.();
  };
}
