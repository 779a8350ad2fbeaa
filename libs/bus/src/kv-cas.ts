import { JetStreamApiCodes, JetStreamApiError } from '@nats-io/jetstream';
import type { KV, KvEntry } from '@nats-io/kv';
import { CortexError } from '@cortex/contracts';

/** Compare-and-set attempts before a write that keeps losing to others gives up (503). */
export const CAS_ATTEMPTS = 10;

/** How hard to try: an entry many writers hit at once (a rate limit) takes more attempts, with a growing random pause between them. */
export interface CasOptions {
  attempts?: number;
  /** Milliseconds to wait after losing attempt `n` (0-based); none by default. */
  pauseMs?: (attempt: number) => number;
}

/** What an edit decides: `value` to write (absent: write nothing) and what the caller gets back. */
export interface CasEdit<R> {
  value?: string;
  result: R;
}

/**
 * Reads `key`, lets `edit` decide from the entry found (null: none), and writes its value only if the
 * entry is still the one read (a create when there was none). When another writer got there first,
 * reads again and reapplies the edit; any other failure (the bus down, a refusal from `edit`) is
 * thrown at once rather than retried as if it were a race. `busy` is the 503's message after
 * `options.attempts` (CAS_ATTEMPTS) lost races. Returns the edit's result and the revision written
 * (null: nothing written).
 */
export async function casUpdate<R>(
  kv: KV,
  key: string,
  edit: (entry: KvEntry | null) => CasEdit<R>,
  busy: string,
  options: CasOptions = {},
): Promise<{ result: R; revision: number | null }> {
  const attempts = options.attempts ?? CAS_ATTEMPTS;
  for (let attempt = 0; attempt < attempts; attempt++) {
    const entry = await kv.get(key);
    const { value, result } = edit(entry);
    if (value === undefined) return { result, revision: null };
    try {
      const revision = entry ? await kv.update(key, value, entry.revision) : await kv.create(key, value);
      return { result, revision };
    } catch (error) {
      if (!lostRace(error)) throw error;
      const pause = options.pauseMs?.(attempt) ?? 0;
      if (pause > 0) await new Promise((done) => setTimeout(done, pause));
    }
  }
  throw new CortexError('service_unavailable', busy, { retryAfter: 1 });
}

/** JetStream's "wrong last sequence" (10071, or 10164 when unknown): someone else wrote the entry first, or created it. */
export function lostRace(error: unknown): boolean {
  if (error instanceof JetStreamApiError)
    return (
      error.code === JetStreamApiCodes.StreamWrongLastSequence ||
      error.code === JetStreamApiCodes.StreamWrongLastSequenceUnknown
    );
  return /wrong last sequence/i.test((error as { message?: string } | null)?.message ?? '');
}
