/**
 * The promise cached under `key`, created on first use. One that rejects is forgotten, so the next
 * call tries again. With `max`, the oldest entry makes room for a new one.
 */
export function memoAsync<T>(
  cache: Map<string, Promise<T>>,
  key: string,
  create: () => Promise<T>,
  max = Infinity,
): Promise<T> {
  let promise = cache.get(key);
  if (!promise) {
    promise = create();
    promise.catch(() => cache.delete(key));
    if (cache.size >= max) cache.delete(cache.keys().next().value as string);
    cache.set(key, promise);
  }
  return promise;
}
