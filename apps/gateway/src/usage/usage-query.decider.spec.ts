import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError, type UsageRecord } from '@cortex/contracts';
import { parseUsageQuery, summarize } from './usage-query.decider.js';

const NOW = Date.parse('2026-11-24T12:00:00Z');
const record = (over: Partial<UsageRecord>): UsageRecord => ({
  id: 'run',
  request_id: 'req',
  account: 'team-a',
  key_id: 'key_a',
  model: 'm1',
  api: 'openai.chat',
  stream: false,
  prompt_tokens: 10,
  cached_prompt_tokens: 2,
  completion_tokens: 5,
  reasoning_tokens: 1,
  at: NOW,
  ...over,
});

describe('usage query decider', () => {
  it('usage query - defaults: everything up to now, summed by account, key and model', () => {
    assert.deepEqual(parseUsageQuery({}, NOW), {
      account: null,
      key: null,
      model: null,
      from: 0,
      to: NOW + 1,
      groupBy: ['account', 'key', 'model'],
    });
  });

  it('usage query - days and RFC 3339 times; a `to` day counts whole', () => {
    const q = parseUsageQuery(
      { from: '2026-11-01', to: '2026-11-24', account: 'team-a', group_by: 'day, model,day' },
      NOW,
    );
    assert.equal(q.from, Date.parse('2026-11-01T00:00:00Z'));
    assert.equal(q.to, Date.parse('2026-11-25T00:00:00Z'));
    assert.deepEqual(q.groupBy, ['day', 'model']);
    assert.equal(parseUsageQuery({ from: '2026-11-24T10:30:00+01:00' }, NOW).from, Date.parse('2026-11-24T09:30:00Z'));
  });

  for (const [name, query, param] of [
    ['an unknown group', { group_by: 'account,week' }, 'group_by'],
    ['a time that is not one', { from: 'yesterday' }, 'from'],
    ['a bare number', { to: '1732406400000' }, 'to'],
    ['to before from', { from: '2026-11-24', to: '2026-11-01' }, 'to'],
    ['a field given twice', { account: ['a', 'b'] }, 'account'],
  ] as const) {
    it(`usage query - ${name} is invalid_request naming ${param}`, () => {
      assert.throws(
        () => parseUsageQuery(query as Record<string, unknown>, NOW),
        (error: unknown) =>
          error instanceof CortexError &&
          error.code === 'invalid_request' &&
          error.extra.param === param &&
          error.message.startsWith(`${param}: `),
      );
    });
  }

  it('usage query - rows sum matching records per group, in a stable order; filters and range apply', () => {
    const records = [
      record({ id: '1' }),
      record({ id: '2', completion_tokens: 7 }),
      record({ id: '3', account: 'team-b', key_id: 'key_b' }),
      record({ id: '4', model: 'm2', at: NOW - 86_400_000 }),
      record({ id: '5', account: null, key_id: null }),
      record({ id: '6', at: NOW + 5 }),
    ];
    const all = summarize(records, parseUsageQuery({ group_by: 'account,key' }, NOW));
    assert.deepEqual(
      all.map((r) => [
        r.account,
        r.key_id,
        r.requests,
        r.prompt_tokens,
        r.cached_prompt_tokens,
        r.completion_tokens,
        r.reasoning_tokens,
        r.total_tokens,
      ]),
      [
        ['team-a', 'key_a', 3, 30, 6, 17, 3, 47],
        ['team-b', 'key_b', 1, 10, 2, 5, 1, 15],
        [null, null, 1, 10, 2, 5, 1, 15],
      ],
    );
    const byDay = summarize(records, parseUsageQuery({ account: 'team-a', group_by: 'day,model' }, NOW));
    assert.deepEqual(
      byDay.map((r) => [r.day, r.model, r.requests]),
      [
        ['2026-11-23', 'm2', 1],
        ['2026-11-24', 'm1', 2],
      ],
    );
    assert.deepEqual(summarize(records, parseUsageQuery({ model: 'm2', from: '2026-11-24' }, NOW)), []);
  });

  it('usage query - money: each record at the price it was recorded with; records without one are counted apart', () => {
    const records = [
      record({ id: '1', cost: 0.000125 }),
      record({ id: '2', cost: 0.1 }),
      record({ id: '3', cost: 0.2 }),
      record({ id: '4' }),
      record({ id: '5', key_id: 'key_b', cost: 1.5 }),
    ];
    const rows = summarize(records, parseUsageQuery({ group_by: 'key' }, NOW));
    assert.deepEqual(
      rows.map((r) => [r.key_id, r.requests, r.cost, r.unpriced_requests]),
      [
        ['key_a', 4, 0.300125, 1],
        ['key_b', 1, 1.5, 0],
      ],
      '0.1 + 0.2 is 0.3 here, not 0.30000000000000004',
    );
  });
});
