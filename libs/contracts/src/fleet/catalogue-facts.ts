import { defined, integer, number, object, optionalNumber, optionalString, string } from '../fields.js';
import { decodeFacts } from '../bus/replies.js';
import type { ModelFacts } from './fleet.messages.js';

/**
 * What the catalogue bucket keeps beside a model, under `factsKey(id)`: what a worker read of its GGUF
 * header (and the memory it estimated) for one source, or why that read failed. A router writes it
 * when the model enters the catalogue; every router reads it through its watch of the bucket.
 */
export interface StoredFacts {
  /** The estimate's inputs the record was read for (`factsSource`): a model whose file, context or slots changed is read again. */
  source: string;
  /** The memory a copy takes, as the worker estimated it; absent when the read failed. */
  bytes?: number;
  /** What the header says; absent when the read failed. */
  facts?: ModelFacts;
  /** Why the last read failed; absent once one succeeded. */
  error?: string;
  /** Reads of this source that failed in a row (0 once one succeeded). */
  failures: number;
  /** When the last read ended, in epoch milliseconds of the router that read it. */
  at: number;
  /** The worker that answered, when one did. */
  workerId?: string;
}

/** The prefix of facts keys in the catalogue bucket; a model's own key (its id in base64url) never holds a dot. */
export const FACTS_KEY_PREFIX = 'facts.';

/** The catalogue bucket key of a model's facts (KV keys allow only a few characters; ids may hold more). */
export function factsKey(id: string): string {
  return `${FACTS_KEY_PREFIX}${Buffer.from(id).toString('base64url')}`;
}

/** The model id of a facts key, or undefined for any other key of the bucket. */
export function factsKeyId(key: string): string | undefined {
  return key.startsWith(FACTS_KEY_PREFIX)
    ? Buffer.from(key.slice(FACTS_KEY_PREFIX.length), 'base64url').toString()
    : undefined;
}

/** What a worker's estimate depends on, as one comparable string (field order fixed). */
export function factsSource(source: {
  source: string;
  contextSize: number;
  slots: number;
  draft?: string;
  kind?: string;
  sha256?: string;
  mmproj?: string;
}): string {
  return JSON.stringify([
    source.source,
    source.contextSize,
    source.slots,
    source.draft ?? null,
    source.kind ?? 'chat',
    source.sha256 ?? null,
    // Only a vision model's: every other model's source reads as before.
    ...(source.mmproj ? [source.mmproj] : []),
  ]);
}

/** Reads a stored facts record; a field that is wrong throws `invalid_request` naming it. */
export function decodeStoredFacts(value: unknown): StoredFacts {
  const stored = object(value, 'facts');
  const facts = decodeFacts(stored.facts, 'facts.facts');
  return defined({
    source: string(stored.source, 'facts.source'),
    bytes: optionalNumber(stored.bytes, 'facts.bytes', 0, Number.MAX_SAFE_INTEGER),
    facts,
    error: optionalString(stored.error, 'facts.error'),
    failures: integer(stored.failures, 'facts.failures', 0),
    at: number(stored.at, 'facts.at', 0),
    workerId: optionalString(stored.workerId, 'facts.workerId'),
  });
}
