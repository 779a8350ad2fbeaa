import type { KV } from '@nats-io/kv';
import { casUpdate } from '@cortex/bus';
import { CortexError } from '@cortex/contracts';

/**
 * Compare-and-set attempts before a decision gives up (503): only under heavy contention on one entry, which every
 * gateway's requests of one key hit.
 */
const CAS_ATTEMPTS = 50;

/**
 * Reads `entry`, applies `edit` to its state and writes the new state only if the entry's revision is
 * still the one read (casUpdate, with more attempts and a short random pause for limits every
 * gateway changes at once). `next: null` writes nothing.
 */
export async function casChange<S, R>(
  kv: KV | null,
  entry: string,
  empty: S,
  edit: (state: S, now: number) => { next: S | null; result: R },
): Promise<R> {
  if (!kv) throw new CortexError('service_unavailable', 'the limits store is not ready yet', { retryAfter: 1 });
  const { result } = await casUpdate(
    kv,
    entry,
    (found) => {
      const { next, result } = edit(found?.operation === 'PUT' ? found.json<S>() : empty, Date.now());
      return next === null ? { result } : { value: JSON.stringify(next), result };
    },
    `limits state of ${entry} is changing too fast to decide; retry`,
    { attempts: CAS_ATTEMPTS, pauseMs: (attempt) => Math.random() * 5 * (attempt + 1) },
  );
  return result;
}
