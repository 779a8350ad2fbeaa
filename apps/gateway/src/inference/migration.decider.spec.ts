import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { MigrationConfig } from '@cortex/config';
import { CortexError, type ErrorCode } from '@cortex/contracts';
import { decideMigration, type MigrationAsk } from './migration.decider.js';

const base = (): MigrationAsk => ({
  error: new CortexError('worker_lost', 'worker w1 is down'),
  cancelled: false,
  checkpoint: {
    promptTokens: 100,
    deliveredTokens: 50,
    unaccounted: 0,
    migrations: 0,
    refused: null,
    textPieces: 40,
    beyondText: null,
  },
  config: Object.assign(new MigrationConfig(), { maxAttempts: 2, maxTokens: 1000 }),
  request: {},
});

/** An upstream's stream: its events carry no token ids. */
const upstream = (a: MigrationAsk): void => {
  a.error = new CortexError('upstream_unavailable', 'the upstream 10.0.0.2:8080 (chat) failed (terminated)');
  a.checkpoint.deliveredTokens = 0;
  a.checkpoint.unaccounted = 40;
};

interface Case {
  title: string;
  change: (ask: MigrationAsk) => void;
  /** null: it migrates; otherwise a pattern of the reason it does not. */
  refused: RegExp | null;
  /** How it goes on, where it does: from the token ids unless said. */
  from?: 'text';
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
    refused: /invalid_output, not a lost worker or a failing upstream/,
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
    title: 'an upstream failing mid-answer: the text goes on as an answer begun',
    change: upstream,
    refused: null,
    from: 'text',
  },
  {
    title: 'a lost worker whose events carried no ids: from the text too',
    change: (a) => void (a.checkpoint.unaccounted = 1),
    refused: null,
    from: 'text',
  },
  {
    title: 'an upstream failing in the middle of its reasoning',
    change: (a) => {
      upstream(a);
      a.checkpoint.beyondText = 'reasoning';
    },
    refused: /40 output event\(s\) came without the token ids behind them, and the output holds reasoning/,
  },
  {
    title: 'an upstream failing after a tool call began',
    change: (a) => {
      upstream(a);
      a.checkpoint.beyondText = 'a tool call';
    },
    refused: /holds a tool call, which an answer begun cannot carry/,
  },
  {
    title: 'an upstream failing in a JSON answer',
    change: (a) => {
      upstream(a);
      a.request = { responseFormat: { type: 'json_object' } };
    },
    refused: /response format holds the output to a grammar/,
  },
  {
    title: 'an upstream failing in a forced call',
    change: (a) => {
      upstream(a);
      a.request = { toolChoice: 'required' };
    },
    refused: /tool_choice holds the output to a call/,
  },
  {
    title: 'an upstream failing in a raw completion',
    change: (a) => {
      upstream(a);
      a.request = { raw: { text: 'Once' } };
    },
    refused: /raw completion/,
  },
  {
    title: "an upstream's answer over the size limit, counted in text events",
    change: (a) => {
      upstream(a);
      a.checkpoint.textPieces = 901;
    },
    refused: /1001 tokens, over gateway.migration.max_tokens/,
  },
  {
    title: "an upstream refusing mid-answer (its 400 is the request's fault)",
    change: (a) => {
      upstream(a);
      a.error = new CortexError('invalid_request', 'x');
    },
    refused: /invalid_request/,
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
      if (c.refused === null) assert.deepEqual(decision, { migrate: true, from: c.from ?? 'tokens' });
      else {
        assert.equal(decision.migrate, false);
        assert.match((decision as { reason: string }).reason, c.refused);
      }
    });
  }
});
