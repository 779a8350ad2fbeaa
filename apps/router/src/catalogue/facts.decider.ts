import type { ModelFacts, StoredFacts } from '@cortex/contracts';

/**
 * When a model's header is read into the catalogue, as pure functions of the stored record: no bus,
 * no clock, no state. FactsService carries the steps out; facts.decider.spec.ts tests them by table.
 */

/** The wait after the first failed read; each failure after it doubles the wait. */
export const FACTS_FIRST_RETRY_MS = 5_000;
/** The longest wait between two reads of a source that keeps failing. */
export const FACTS_MAX_RETRY_MS = 5 * 60_000;
/** Failed reads in a row after which the routers stop trying a source (its first request reads it again). */
export const FACTS_MAX_FAILURES = 8;

export interface FactsQuestion {
  /** The model's estimate inputs as the catalogue has them now (`factsSource`). */
  source: string;
  /** The record the catalogue bucket holds for the model, if any. */
  stored: StoredFacts | undefined;
  now: number;
  /** Workers up: one of them reads the header. */
  workersUp: number;
}

export type FactsStep =
  /** The bucket holds this source's facts. */
  | { kind: 'known' }
  /** Ask a worker now; `failures` is how many reads of this source failed before. */
  | { kind: 'read'; failures: number }
  /** The last read failed: wait until `at` (epoch ms) before the next. */
  | { kind: 'later'; at: number }
  /** This source failed `failures` times in a row: no more reads until it changes. */
  | { kind: 'given_up'; failures: number }
  /** Nobody can read it yet. */
  | { kind: 'no_worker' };

/** What to do about one model's facts now. */
export function factsStep(question: FactsQuestion): FactsStep {
  const { stored } = question;
  const same = stored !== undefined && stored.source === question.source;
  if (same && stored.bytes !== undefined && stored.error === undefined) return { kind: 'known' };
  // A record of another source (the model's file, context or slots changed) counts for nothing.
  const failures = same ? stored.failures : 0;
  if (failures >= FACTS_MAX_FAILURES) return { kind: 'given_up', failures };
  if (same && failures > 0) {
    const at = stored.at + retryDelayMs(failures);
    if (question.now < at) return { kind: 'later', at };
  }
  if (question.workersUp === 0) return { kind: 'no_worker' };
  return { kind: 'read', failures };
}

/** How long after its `failures`-th failure in a row a source is read again. */
export function retryDelayMs(failures: number): number {
  return Math.min(FACTS_MAX_RETRY_MS, FACTS_FIRST_RETRY_MS * 2 ** Math.max(0, failures - 1));
}

/** What a read of the header ended with. */
export type ReadOutcome = { bytes: number; facts?: ModelFacts; workerId?: string } | { error: string };

/**
 * The record to write after a read of `source`, given the record the bucket holds now (which another
 * router may have written meanwhile); undefined: leave it. A failure never replaces facts of the same
 * source, and facts already there are not written again.
 */
export function afterRead(
  current: StoredFacts | undefined,
  source: string,
  outcome: ReadOutcome,
  now: number,
): StoredFacts | undefined {
  const same = current !== undefined && current.source === source;
  if (same && current.bytes !== undefined && current.error === undefined) return undefined;
  if ('error' in outcome) return { source, error: outcome.error, failures: (same ? current.failures : 0) + 1, at: now };
  return {
    source,
    bytes: outcome.bytes,
    ...(outcome.facts && { facts: outcome.facts }),
    failures: 0,
    at: now,
    ...(outcome.workerId && { workerId: outcome.workerId }),
  };
}
