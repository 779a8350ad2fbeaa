import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { ModelCatalogue } from '@cortex/bus';
import { CortexConfig, type LimitsPolicy } from '@cortex/config';
import { NO_USAGE, type KeyRecord } from '@cortex/contracts';
import type { KeyDirectory } from '../keys/key-directory.js';
import { RequestMeter } from '../usage/request-meter.js';
import type { BudgetLedger } from './budget-ledger.js';
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

/** An admission whose `failing` checks throw (their store full), under `policy`; what each check did is logged in `calls`. */
function admission(failing: Check[], policy: Partial<Record<Check, LimitsPolicy>>) {
  const calls: string[] = [];
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
    reserve: () =>
      failing.includes('budget')
        ? down()
        : Promise.resolve({
            kind: 'admit',
            settle: (used: number) => Promise.resolve(void calls.push(`budget ${used}`)),
          }),
  } as unknown as BudgetLedger;
  const directory = { account: () => undefined } as unknown as KeyDirectory;
  const catalogue = { find: () => undefined } as unknown as ModelCatalogue;
  const config = new CortexConfig();
  Object.assign(config.gateway.limitsUnavailable, policy);
  return { keys: new KeyAdmission(limiter, tokens, budgets, directory, catalogue, config), calls };
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
  it('key admission - a check that cannot be made refuses with a 503 (fail-closed) or admits uncounted by it (fail-open), as configured per check', async () => {
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
  });

  it('key admission - the meter is billed to the key; the slot is released when the response closes, the budget once its runs reported', async () => {
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
    assert.deepEqual(calls.sort(), ['budget 12', 'release', 'tpm 12']);
  });

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
    assert.deepEqual(calls.sort(), ['budget 7', 'release', 'tpm 7']);
  });
});
