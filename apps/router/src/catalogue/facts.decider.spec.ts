import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { StoredFacts } from '@cortex/contracts';
import {
  afterRead,
  FACTS_FIRST_RETRY_MS,
  FACTS_MAX_FAILURES,
  FACTS_MAX_RETRY_MS,
  factsStep,
  retryDelayMs,
  type FactsQuestion,
  type FactsStep,
  type ReadOutcome,
} from './facts.decider.js';

const NOW = 10_000_000;
const SOURCE = '["http://hub/m.gguf",512,1,null,"chat",null]';
const OTHER = '["http://hub/m.gguf",4096,1,null,"chat",null]';
const read = (over: Partial<StoredFacts> = {}): StoredFacts => ({
  source: SOURCE,
  bytes: 20 * 2 ** 20,
  facts: { architecture: 'llama' },
  failures: 0,
  at: NOW - 60_000,
  ...over,
});
const failed = (failures: number, agoMs: number, over: Partial<StoredFacts> = {}): StoredFacts => ({
  source: SOURCE,
  error: 'cannot read the GGUF header: 404',
  failures,
  at: NOW - agoMs,
  ...over,
});

describe('facts decider', () => {
  const cases: Array<[string, Partial<FactsQuestion>, FactsStep]> = [
    ['a model never read, a worker up: read it', { stored: undefined }, { kind: 'read', failures: 0 }],
    ['a model never read, no worker yet: wait for one', { stored: undefined, workersUp: 0 }, { kind: 'no_worker' }],
    ['facts of this source are in the bucket', { stored: read() }, { kind: 'known' }],
    ['facts of this source, no worker: still known', { stored: read(), workersUp: 0 }, { kind: 'known' }],
    [
      'facts of another source (its context changed): read again',
      { stored: read({ source: OTHER }) },
      { kind: 'read', failures: 0 },
    ],
    [
      'another source that failed often: its failures do not count',
      { stored: failed(FACTS_MAX_FAILURES, 0, { source: OTHER }) },
      { kind: 'read', failures: 0 },
    ],
    [
      'one failure, less than the first wait ago: later',
      { stored: failed(1, FACTS_FIRST_RETRY_MS - 1) },
      { kind: 'later', at: NOW + 1 },
    ],
    [
      'one failure, the first wait passed: read again',
      { stored: failed(1, FACTS_FIRST_RETRY_MS) },
      { kind: 'read', failures: 1 },
    ],
    [
      'three failures wait four times the first wait',
      { stored: failed(3, FACTS_FIRST_RETRY_MS * 3) },
      { kind: 'later', at: NOW + FACTS_FIRST_RETRY_MS },
    ],
    [
      'a failure whose wait passed, no worker: wait for one',
      { stored: failed(2, FACTS_MAX_RETRY_MS), workersUp: 0 },
      { kind: 'no_worker' },
    ],
    [
      'the last allowed failure, its wait passed: read once more',
      { stored: failed(FACTS_MAX_FAILURES - 1, FACTS_MAX_RETRY_MS) },
      { kind: 'read', failures: FACTS_MAX_FAILURES - 1 },
    ],
    [
      'as many failures as allowed: given up',
      { stored: failed(FACTS_MAX_FAILURES, 10 * FACTS_MAX_RETRY_MS) },
      { kind: 'given_up', failures: FACTS_MAX_FAILURES },
    ],
    [
      'a record with an error and no bytes is not known, whatever it says',
      { stored: failed(1, FACTS_MAX_RETRY_MS, { facts: { architecture: 'llama' } }) },
      { kind: 'read', failures: 1 },
    ],
  ];
  for (const [title, over, expected] of cases) {
    it(`facts decider - ${title}`, () => {
      assert.deepEqual(factsStep({ source: SOURCE, stored: undefined, now: NOW, workersUp: 1, ...over }), expected);
    });
  }

  it('facts decider - the wait doubles from the first and stops growing at the longest', () => {
    assert.deepEqual(
      [1, 2, 3, 4].map(retryDelayMs),
      [1, 2, 4, 8].map((n) => n * FACTS_FIRST_RETRY_MS),
    );
    assert.equal(retryDelayMs(FACTS_MAX_FAILURES), FACTS_MAX_RETRY_MS);
    assert.equal(retryDelayMs(50), FACTS_MAX_RETRY_MS);
  });

  const success: ReadOutcome = { bytes: 42, facts: { architecture: 'qwen2', fileBytes: 7 }, workerId: 'w1' };
  const failure: ReadOutcome = { error: 'cannot read the GGUF header: 404' };
  const writes: Array<[string, StoredFacts | undefined, ReadOutcome, StoredFacts | undefined]> = [
    [
      'a first read that succeeds',
      undefined,
      success,
      {
        source: SOURCE,
        bytes: 42,
        facts: { architecture: 'qwen2', fileBytes: 7 },
        failures: 0,
        at: NOW,
        workerId: 'w1',
      },
    ],
    [
      'a first read that fails counts one failure',
      undefined,
      failure,
      { source: SOURCE, ...failure, failures: 1, at: NOW },
    ],
    ['a failure after two counts three', failed(2, 1), failure, { source: SOURCE, ...failure, failures: 3, at: NOW }],
    [
      'a failure after facts of another source counts one, and replaces them',
      read({ source: OTHER }),
      failure,
      { source: SOURCE, ...failure, failures: 1, at: NOW },
    ],
    [
      'a success after failures clears them',
      failed(5, 1),
      { bytes: 42 },
      { source: SOURCE, bytes: 42, failures: 0, at: NOW },
    ],
    [
      'a failure never replaces facts of the same source (another router read them meanwhile)',
      read(),
      failure,
      undefined,
    ],
    ['facts of the same source are not written again', read(), success, undefined],
  ];
  for (const [title, current, outcome, expected] of writes) {
    it(`facts decider - after a read: ${title}`, () => {
      assert.deepEqual(afterRead(current, SOURCE, outcome, NOW), expected);
    });
  }
});
