import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { MigrationConfig } from '@cortex/config';
import { CortexError, type ErrorCode } from '@cortex/contracts';
import { decideMigration, type MigrationAsk } from './migration.decider.js';

const base = (): MigrationAsk => ({
  error: new CortexError('worker_lost', 'worker w1 is down'),
  cancelled: false,
  checkpoint: { promptTokens: 100, deliveredTokens: 50, unaccounted: 0, migrations: 0, refused: null },
  config: Object.assign(new MigrationConfig(), { maxAttempts: 2, maxTokens: 1000 }),
});

interface Case {
  title: string;
  change: (ask: MigrationAsk) => void;
  /** null: it migrates; otherwise a pattern of the reason it does not. */
  refused: RegExp | null;
}

const code = (c: ErrorCode) => (ask: MigrationAsk) => void (ask.error = new CortexError(c, 'x'));

const CASES: Case[] = [
  { title: 'a lost worker after the first token', change: () => undefined, refused: null },
  {
    title: 'a lost worker before any token was delivered',
    change: (a) => void (a.checkpoint.deliveredTokens = 0),
    refused: null,
  },
  {
    title: 'the second move of a stream allowed two',
    change: (a) => void (a.checkpoint.migrations = 1),
    refused: null,
  },
  { title: 'exactly at the size limit', change: (a) => void (a.checkpoint.deliveredTokens = 900), refused: null },
  { title: 'the client went away', change: (a) => void (a.cancelled = true), refused: /cancelled/ },
  {
    title: 'a failure that is not a lost worker',
    change: code('invalid_output'),
    refused: /invalid_output, not a lost worker/,
  },
  { title: 'an internal error', change: code('internal'), refused: /internal/ },
  { title: 'migration turned off', change: (a) => void (a.config.maxAttempts = 0), refused: /off/ },
  {
    title: 'the moves allowed are used up',
    change: (a) => void (a.checkpoint.migrations = 2),
    refused: /moved 2 time/,
  },
  {
    title: 'a run refused by its driver (n > 1)',
    change: (a) => void (a.checkpoint.refused = 'several choices'),
    refused: /several choices/,
  },
  {
    title: 'output delivered without token ids',
    change: (a) => void (a.checkpoint.unaccounted = 1),
    refused: /without the token ids/,
  },
  {
    title: 'one token over the size limit',
    change: (a) => void (a.checkpoint.deliveredTokens = 901),
    refused: /1001 tokens, over gateway.migration.max_tokens \(1000\)/,
  },
];

describe('migration decider', () => {
  for (const c of CASES) {
    it(`migration decider - ${c.title}: ${c.refused ? 'stays' : 'moves'}`, () => {
      const ask = base();
      c.change(ask);
      const decision = decideMigration(ask);
      if (c.refused === null) assert.deepEqual(decision, { migrate: true });
      else {
        assert.equal(decision.migrate, false);
        assert.match((decision as { reason: string }).reason, c.refused);
      }
    });
  }
});
