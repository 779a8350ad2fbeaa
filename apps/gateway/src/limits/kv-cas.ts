import type { KV } from '@nats-io/kv';
import { lostRace } from '@cortex/bus';
import { CortexError } from '@cortex/contracts';

/** Compare-and-set attempts before a decision gives up (503): only under heavy contention on one entry. */
const CAS_ATTEMPTS = 50;

/**
 * Reads `entry`, applies `edit` and writes the new state only if the entry's revision is still the one
 * read; when another gateway wrote first, reads its write and decides again, after a short random
 * pause (any other error is thrown at once). `next: null` writes nothing.
 */
export async function casChange<S, R>(kv: KV | null, entry: string, empty: S, edit: (state: S, now: number) => { next: S | null; result: R }): Promise<R> {
  if (!kv) throw new CortexError('service_unavailable', 'the limits store is not ready yet', { retryAfter: 1 });
  for (let attempt = 0; attempt < CAS_ATTEMPTS; attempt++) {
    const found = await kv.get(entry);
    const state = found?.operation === 'PUT' ? found.json<S>() : empty;
    const { next, result } = edit(state, Date.now());
    if (next === null) return result;
    try {
      if (found) await kv.update(entry, JSON.stringify(next), found.revision);
      else await kv.create(entry, JSON.stringify(next));
      return result;
    } catch (error) {
      // Only another gateway's write is worth deciding again; NATS failing is the caller's to answer.
      if (!lostRace(error)) throw error;
      await new Promise((done) => setTimeout(done, Math.random() * 5 * (attempt + 1)));
    }
  }
  throw new CortexError('service_unavailable', `limits state of ${entry} is changing too fast to decide; retry`, { retryAfter: 1 });
}
