import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { RequestFinishedEvent } from '../events/request-finished.event.js';
import { billionthsOf, costOf, decodeUsageRecord, toBillionth, usageRecordOf } from './usage.record.js';

const event = (usage: RequestFinishedEvent['usage']): RequestFinishedEvent => ({
  requestId: 'req-1',
  model: 'cortex-chat',
  workerId: 'w1',
  dialect: 'anthropic.messages',
  stream: true,
  status: 200,
  errorCode: null,
  finishReason: 'stop',
  usage,
  timings: null,
  durationMs: 12,
  coldStart: false,
  placeMs: null,
  finishedAt: 1_700_000_000_000,
});

describe('usage record', () => {
  it('usage record - a run that used tokens becomes a record under its key and account, with the run id', () => {
    const record = usageRecordOf(
      event({ promptTokens: 9, cachedPromptTokens: 4, completionTokens: 3, reasoningTokens: 1 }),
      { account: 'team-a', keyId: 'key_1' },
      'run-1',
    );
    assert.deepEqual(record, {
      id: 'run-1',
      request_id: 'req-1',
      account: 'team-a',
      key_id: 'key_1',
      model: 'cortex-chat',
      api: 'anthropic.messages',
      stream: true,
      prompt_tokens: 9,
      cached_prompt_tokens: 4,
      completion_tokens: 3,
      reasoning_tokens: 1,
      at: 1_700_000_000_000,
    });
    assert.deepEqual(decodeUsageRecord(JSON.parse(JSON.stringify(record))), record);
  });

  it('usage record - no usage or no tokens is no record; without a stored key account and key are null', () => {
    assert.equal(usageRecordOf(event(null), null, 'r'), null);
    assert.equal(
      usageRecordOf(
        event({ promptTokens: 0, cachedPromptTokens: 0, completionTokens: 0, reasoningTokens: 0 }),
        null,
        'r',
      ),
      null,
    );
    const anonymous = usageRecordOf(
      event({ promptTokens: 1, cachedPromptTokens: 0, completionTokens: 0, reasoningTokens: 0 }),
      null,
      'r',
    );
    assert.equal(anonymous?.account, null);
    assert.equal(anonymous?.key_id, null);
  });

  it('usage record - a stored record with a bad field throws naming it', () => {
    const good = usageRecordOf(
      event({ promptTokens: 1, cachedPromptTokens: 0, completionTokens: 1, reasoningTokens: 0 }),
      null,
      'r',
    );
    assert.throws(() => decodeUsageRecord({ ...good, completion_tokens: -1 }), /completion_tokens/);
    assert.throws(() => decodeUsageRecord({ ...good, api: 'smtp' }), /api/);
    assert.throws(() => decodeUsageRecord({ ...good, id: 5 }), /id/);
  });

  it('usage record - a priced model: the cost of fresh prompt, cached prompt and output tokens per million, kept in the record', () => {
    const usage = { promptTokens: 1_000, cachedPromptTokens: 400, completionTokens: 250, reasoningTokens: 50 };
    const price = { input: 3, cachedInput: 0.3, output: 15 };
    const record = usageRecordOf(event(usage), null, 'r', price);
    // 600 × 3 + 400 × 0.3 + 250 × 15 = 1,800 + 120 + 3,750 = 5,670 per million.
    assert.equal(record?.cost, 0.00567);
    assert.deepEqual(decodeUsageRecord(JSON.parse(JSON.stringify(record))), record);
    assert.equal(
      costOf({ prompt_tokens: 1_000, cached_prompt_tokens: 400, completion_tokens: 0 }, { input: 2, output: 8 }),
      0.002,
      'cached tokens at the input price when no cached price is set',
    );
    assert.equal(usageRecordOf(event(usage), null, 'r')?.cost, undefined, 'no price, no cost');
    assert.throws(() => decodeUsageRecord({ ...record, cost: -1 }), /cost/);
  });

  it('usage record - a cost in whole billionths: costs summed as integers stay exact where the floats drift', () => {
    assert.equal(billionthsOf(0.00567), 5_670_000);
    assert.equal(billionthsOf(toBillionth(0.1 + 0.2)), 300_000_000);
    // Ten records of 0.1 each: the integers add up to exactly one unit, the floats do not.
    const costs = Array.from({ length: 10 }, () => 0.1);
    assert.notEqual(
      costs.reduce((sum, c) => sum + c, 0),
      1,
    );
    assert.equal(
      costs.reduce((sum, c) => sum + billionthsOf(c), 0),
      1e9,
    );
  });
});
