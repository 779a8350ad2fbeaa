import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { ModelCatalogue } from '@cortex/bus';
import { CortexConfig, type LimitsPolicy } from '@cortex/config';
import { NO_USAGE, type KeyRecord, type UsageRecord } from '@cortex/contracts';
import type { KeyDirectory } from '../keys/key-directory.js';
import { RequestMeter } from '../usage/request-meter.js';
import { FinalWrites } from '../usage/final-writes.js';
import type { BudgetAsk, BudgetLedger, BudgetUse } from './budget-ledger.js';
import { KeyAdmission, type AdmissionAsk } from './key-admission.js';
import type { RateLimiter } from './rate-limiter.js';
import type { TokenRateLimiter } from './token-rate-limiter.js';

const KEY: KeyRecord = {
  id: 'key_1',
  name: 'ci',
  account: 'team-a',
  limits: { requests_per_minute: 10, tokens_per_minute: 1_000, token_budget: { tokens: 1_000, window: 'balance' } },
  models: null,
  expires_at: null,
  tier: 5,
  created_at: '2026-11-01T00:00:00Z',
  updated_at: '2026-11-01T00:00:00Z',
  revoked_at: null,
  secrets: [],
};

type Check = 'requests' | 'tokens' | 'budget';
const down = (): Promise<never> => Promise.reject(new Error('insufficient resources'));

/**
 * An admission whose `failing` checks throw (their store full), under `policy`; what each check did is logged in
 * `calls`, what the budgets were asked in `asks`.
 */
function admission(
  failing: Check[],
  policy: Partial<Record<Check, LimitsPolicy>>,
  models: Record<string, { contextSize: number; cost?: { input: number; cachedInput?: number; output: number } }> = {},
) {
  const calls: string[] = [];
  const asks: BudgetAsk[] = [];
  const limiter = {
    admit: () =>
      failing.includes('requests')
        ? down()
        : Promise.resolve({
            kind: 'admit',
            requests: null,
            release: () => Promise.resolve(void calls.push('release')),
          }),
  } as unknown as RateLimiter;
  const tokens = {
    admit: () =>
      failing.includes('tokens')
        ? down()
        : Promise.resolve({
            kind: 'admit',
            window: null,
            settle: (used: number) => Promise.resolve(void calls.push(`tpm ${used}`)),
          }),
  } as unknown as TokenRateLimiter;
  const budgets = {
    reserve: (_key: unknown, _account: unknown, _id: string, ask: BudgetAsk) =>
      failing.includes('budget')
        ? down()
        : Promise.resolve({
            kind: 'admit',
            settle: (used: BudgetUse) => Promise.resolve(void calls.push(`budget ${used.tokens} ${used.money}`)),
          }).finally(() => asks.push(ask)),
  } as unknown as BudgetLedger;
  const directory = { account: () => undefined } as unknown as KeyDirectory;
  const catalogue = { find: (name: string) => models[name] } as unknown as ModelCatalogue;
  const config = new CortexConfig();
  Object.assign(config.gateway.limitsUnavailable, policy);
  return {
    keys: new KeyAdmission(limiter, tokens, budgets, directory, catalogue, new FinalWrites(), config),
    calls,
    asks,
  };
}

const ask = (meter = new RequestMeter(), background = false): AdmissionAsk => ({
  key: KEY,
  requestId: 'req',
  meter,
  path: '/v1/chat/completions',
  body: { model: 'm', max_tokens: 10 },
  bytes: 40,
  background,
});

describe('key admission', () => {
  it(
    'key admission - a check that cannot be made refuses with a 503 (fail-closed) ' +
      'or admits uncounted by it (fail-open), as configured per check',
    async () => {
      const cases: Array<{ failing: Check[]; policy: Partial<Record<Check, LimitsPolicy>>; admitted: boolean }> = [
        { failing: [], policy: {}, admitted: true },
        { failing: ['requests'], policy: {}, admitted: false },
        { failing: ['requests'], policy: { requests: 'admit' }, admitted: true },
        { failing: ['tokens'], policy: { requests: 'admit', budget: 'admit' }, admitted: false },
        { failing: ['tokens'], policy: { tokens: 'admit' }, admitted: true },
        { failing: ['budget'], policy: {}, admitted: false },
        { failing: ['budget'], policy: { budget: 'admit' }, admitted: true },
        {
          failing: ['requests', 'tokens', 'budget'],
          policy: { requests: 'admit', tokens: 'admit', budget: 'admit' },
          admitted: true,
        },
        { failing: ['requests', 'budget'], policy: { requests: 'admit' }, admitted: false },
      ];
      for (const { failing, policy, admitted } of cases) {
        const decision = await admission(failing, policy).keys.admit(ask());
        const name = `failing ${failing.join('+') || 'none'} under ${JSON.stringify(policy)}`;
        assert.equal(decision.kind === 'admit', admitted, name);
        if (decision.kind === 'refuse') {
          assert.equal(decision.error.status, 503, name);
          assert.match(
            decision.error.message,
            /the key's limits cannot be checked now \(insufficient resources\); retry/,
            name,
          );
          assert.equal(decision.retryAfterMs, 1_000, name);
        }
      }
    },
  );

  it(
    'key admission - the meter is billed to the key; ' +
      'the slot is released when the response closes, the budget once its runs reported',
    async () => {
      const { keys, calls } = admission([], {});
      const meter = new RequestMeter();
      const decision = await keys.admit(ask(meter));
      assert.equal(decision.kind, 'admit');
      assert.deepEqual(meter.payer, { account: 'team-a', keyId: 'key_1' });
      const report = meter.opened();
      if (decision.kind === 'admit') decision.done();
      assert.deepEqual(calls, ['release'], 'the slot frees at once; the run has not reported');
      report({ ...NO_USAGE, promptTokens: 7, completionTokens: 5 });
      await meter.settled;
      await new Promise((done) => setImmediate(done));
      assert.deepEqual(calls.sort(), ['budget 12 0', 'release', 'tpm 12']);
    },
  );

  it('key admission - a background response keeps its slot until its run reported', async () => {
    const { keys, calls } = admission([], {});
    const meter = new RequestMeter();
    const decision = await keys.admit(ask(meter, true));
    const report = meter.opened();
    if (decision.kind === 'admit') decision.done();
    await new Promise((done) => setImmediate(done));
    assert.deepEqual(calls, [], 'the reply closed, the run goes on: the slot is held');
    report({ ...NO_USAGE, promptTokens: 3, completionTokens: 4 });
    await meter.settled;
    await new Promise((done) => setImmediate(done));
    assert.deepEqual(calls.sort(), ['budget 7 0', 'release', 'tpm 7']);
  });

  it(
    "key admission - a money budget reserves the request's bound at its model's price, " +
      "and is charged its usage records' cost",
    async () => {
      const { keys, calls, asks } = admission(
        [],
        {},
        {
          priced: { contextSize: 512, cost: { input: 2, cachedInput: 4, output: 10 } },
          free: { contextSize: 512 },
        },
      );
      const meter = new RequestMeter();
      const decision = await keys.admit({ ...ask(meter), body: { model: 'priced', max_tokens: 10 } });
      // 40 bytes of prompt at the dearer input price (4 a million: 4,000 billionths a token) and 10
      // output tokens at 10 a million: 160,000 + 100,000 billionths.
      assert.deepEqual(asks[0], { tokens: 50, money: 260_000, model: 'priced' });
      await keys.admit({ ...ask(), body: { model: 'free', max_tokens: 10 } });
      assert.deepEqual(asks[1], { tokens: 50, money: null, model: 'free' }, 'no price: nothing bounds it');
      await keys.admit({ ...ask(), body: { model: 'unknown' } });
      assert.deepEqual(asks[2], { tokens: 40 + 4_096, money: null, model: 'unknown' });
      // Two runs of the request leave usage records; the meter sums their cost in billionths.
      const record = (cost: number | undefined): UsageRecord => ({
        id: 'run',
        request_id: 'req',
        account: 'team-a',
        key_id: 'key_1',
        model: 'priced',
        api: 'openai.chat',
        stream: false,
        prompt_tokens: 1,
        cached_prompt_tokens: 0,
        completion_tokens: 1,
        reasoning_tokens: 0,
        at: 0,
        ...(cost !== undefined && { cost }),
      });
      const first = meter.opened();
      const second = meter.opened();
      RequestMeter.charge(meter.payer, record(0.000012));
      first({ ...NO_USAGE, promptTokens: 7, completionTokens: 5 });
      RequestMeter.charge(meter.payer, record(0.1));
      RequestMeter.charge(meter.payer, record(undefined));
      RequestMeter.charge({ account: 'team-a', keyId: 'key_1' }, record(5));
      second({ ...NO_USAGE, promptTokens: 1, completionTokens: 1 });
      if (decision.kind === 'admit') decision.done();
      await meter.settled;
      await new Promise((done) => setImmediate(done));
      assert.ok(calls.includes('budget 14 100012000'), calls.join(', '));
    },
  );
});
