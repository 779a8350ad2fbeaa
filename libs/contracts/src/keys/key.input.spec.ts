import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError } from '../errors/error-codes.js';
import { applyLimitsPatch, parseAccountPut, parseKeyCreate, parseKeyUpdate, parseRotate } from './key.input.js';

const NOW = Date.parse('2026-06-01T00:00:00Z');

describe('keys input', () => {
  it('keys - create fills defaults: account "default", every model, no expiry, tier 5', () => {
    assert.deepEqual(parseKeyCreate({ name: 'ci' }, NOW), {
      name: 'ci',
      account: 'default',
      limits: {},
      models: null,
      mcp_servers: null,
      expires_at: null,
      tier: 5,
    });
  });

  it('keys - create keeps what it is given, times normalised to UTC', () => {
    const input = parseKeyCreate(
      {
        name: ' batch ',
        account: 'team-a',
        limits: { requests_per_minute: 60, concurrent_requests: 4, token_budget: { tokens: 1000, window: 'day' } },
        models: ['cortex-chat'],
        mcp_servers: [' docs ', 'fs'],
        expires_at: '2027-01-01T01:00:00+01:00',
        tier: 2,
      },
      NOW,
    );
    assert.deepEqual(input, {
      name: 'batch',
      account: 'team-a',
      limits: { requests_per_minute: 60, concurrent_requests: 4, token_budget: { tokens: 1000, window: 'day' } },
      models: ['cortex-chat'],
      mcp_servers: ['docs', 'fs'],
      expires_at: '2027-01-01T00:00:00.000Z',
      tier: 2,
    });
  });

  const refusals: Array<[string, unknown, string]> = [
    ['no name', {}, 'name'],
    ['an empty name', { name: '' }, 'name'],
    ['an unknown field', { name: 'a', rpm: 3 }, 'rpm'],
    ['an account with a dot', { name: 'a', account: 'a.b' }, 'account'],
    ['a limit of 0', { name: 'a', limits: { requests_per_minute: 0 } }, 'limits.requests_per_minute'],
    ['a fractional limit', { name: 'a', limits: { concurrent_requests: 1.5 } }, 'limits.concurrent_requests'],
    ['an unknown limit', { name: 'a', limits: { rpm: 3 } }, 'limits.rpm'],
    [
      'a budget window not known',
      { name: 'a', limits: { token_budget: { tokens: 5, window: 'week' } } },
      'limits.token_budget.window',
    ],
    [
      'a budget without tokens',
      { name: 'a', limits: { token_budget: { window: 'day' } } },
      'limits.token_budget.tokens',
    ],
    [
      'a money budget of 0',
      { name: 'a', limits: { money_budget: { amount: 0, window: 'month' } } },
      'limits.money_budget.amount',
    ],
    ['a negative money budget', { name: 'a', limits: { money_budget: { amount: -5 } } }, 'limits.money_budget.amount'],
    [
      'a money budget given as a string',
      { name: 'a', limits: { money_budget: { amount: '50' } } },
      'limits.money_budget.amount',
    ],
    [
      'a money budget past what billionths count exactly',
      { name: 'a', limits: { money_budget: { amount: 10_000_000 } } },
      'limits.money_budget.amount',
    ],
    [
      'a money budget window not known',
      { name: 'a', limits: { money_budget: { amount: 5, window: 'year' } } },
      'limits.money_budget.window',
    ],
    ['a money budget in tokens', { name: 'a', limits: { money_budget: { tokens: 5 } } }, 'limits.money_budget.tokens'],
    ['a money budget that is a number', { name: 'a', limits: { money_budget: 50 } }, 'limits.money_budget'],
    ['an empty models list', { name: 'a', models: [] }, 'models'],
    ['a model that is not a string', { name: 'a', models: ['x', 3] }, 'models[1]'],
    ['an empty MCP servers list', { name: 'a', mcp_servers: [] }, 'mcp_servers'],
    ['an MCP server label with a space', { name: 'a', mcp_servers: ['docs', 'my server'] }, 'mcp_servers[1]'],
    ['an expiry in the past', { name: 'a', expires_at: '2020-01-01T00:00:00Z' }, 'expires_at'],
    ['an expiry that is not a time', { name: 'a', expires_at: 'tomorrow' }, 'expires_at'],
    ['tier 0', { name: 'a', tier: 0 }, 'tier'],
    ['tier 10', { name: 'a', tier: 10 }, 'tier'],
    ['a body that is an array', [], 'body'],
  ];
  for (const [what, body, param] of refusals) {
    it(`keys - create refuses ${what}, naming ${param}`, () => {
      assert.throws(
        () => parseKeyCreate(body, NOW),
        (error: unknown) =>
          error instanceof CortexError &&
          error.code === 'invalid_request' &&
          error.extra.param === param &&
          error.message.startsWith(`${param}: `),
      );
    });
  }

  it('keys - a money budget is an amount of billing.currency with a window (balance by default), beside a token budget', () => {
    assert.deepEqual(
      parseKeyCreate(
        {
          name: 'a',
          limits: { money_budget: { amount: 0.25 }, token_budget: { tokens: 1000, window: 'day' } },
        },
        NOW,
      ).limits,
      { money_budget: { amount: 0.25, window: 'balance' }, token_budget: { tokens: 1000, window: 'day' } },
    );
    assert.deepEqual(
      parseKeyCreate({ name: 'a', limits: { money_budget: { amount: 50, window: 'month' } } }, NOW).limits,
      { money_budget: { amount: 50, window: 'month' } },
    );
    assert.deepEqual(parseKeyUpdate({ limits: { money_budget: null } }, NOW), { limits: { money_budget: null } });
    assert.deepEqual(
      applyLimitsPatch({ money_budget: { amount: 5, window: 'day' }, requests_per_minute: 3 }, { money_budget: null }),
      { requests_per_minute: 3 },
    );
    assert.deepEqual(parseAccountPut('team-a', { limits: { money_budget: { amount: 100, window: 'month' } } }), {
      name: 'team-a',
      limits: { money_budget: { amount: 100, window: 'month' } },
    });
  });

  it('keys - update takes any field; null clears a limit, models, MCP servers or the expiry', () => {
    assert.deepEqual(
      parseKeyUpdate(
        {
          limits: { requests_per_minute: null, concurrent_requests: 2 },
          models: null,
          mcp_servers: null,
          expires_at: null,
        },
        NOW,
      ),
      {
        limits: { requests_per_minute: null, concurrent_requests: 2 },
        models: null,
        mcp_servers: null,
        expires_at: null,
      },
    );
    assert.throws(() => parseKeyUpdate({}, NOW), /body: names nothing to change/);
    assert.throws(() => parseKeyUpdate({ secrets: [] }, NOW), /secrets: is not a known field/);
  });

  it('keys - a limits patch replaces given fields and removes nulls', () => {
    assert.deepEqual(
      applyLimitsPatch(
        { requests_per_minute: 5, concurrent_requests: 2 },
        { requests_per_minute: null, tokens_per_minute: 100 },
      ),
      { concurrent_requests: 2, tokens_per_minute: 100 },
    );
  });

  const graces: Array<[unknown, number | string]> = [
    [undefined, 0],
    [{}, 0],
    [{ grace_s: 3600 }, 3600],
    [{ grace_s: -1 }, 'grace_s'],
    [{ grace_s: 31 * 24 * 3600 }, 'grace_s'],
    [{ grace: 5 }, 'grace'],
  ];
  for (const [body, expected] of graces) {
    it(`keys - rotate ${JSON.stringify(body)} → ${expected}`, () => {
      if (typeof expected === 'number') assert.deepEqual(parseRotate(body), { grace_s: expected });
      else
        assert.throws(
          () => parseRotate(body),
          (error: unknown) => error instanceof CortexError && error.extra.param === expected,
        );
    });
  }

  it('keys - an account takes limits only, and a name fit for a KV key', () => {
    assert.deepEqual(parseAccountPut('team-a', { limits: { concurrent_requests: 8 } }), {
      name: 'team-a',
      limits: { concurrent_requests: 8 },
    });
    assert.throws(() => parseAccountPut('team a', {}), /account: must be 1-64 letters/);
    assert.throws(() => parseAccountPut('team', { tier: 1 }), /tier: is not a known field/);
  });
});
