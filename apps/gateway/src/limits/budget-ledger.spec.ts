import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { NatsConnection } from '@nats-io/transport-node';
import { BusClient, connectBus, natsServerOnPath, startNatsServer, type LocalNatsServer } from '@cortex/bus';
import { CortexConfig } from '@cortex/config';
import type { KeyRecord, Usage } from '@cortex/contracts';
import { BudgetLedger } from './budget-ledger.js';
import { LimitsBucket } from './limits-bucket.js';
import { FinalWrites } from '../usage/final-writes.js';

const KEY: KeyRecord = {
  id: 'key_ledger',
  name: 'ledger',
  account: 'default',
  limits: { token_budget: { tokens: 1_000, window: 'balance' } },
  models: null,
  expires_at: null,
  tier: 5,
  created_at: '2026-11-01T00:00:00Z',
  updated_at: '2026-11-01T00:00:00Z',
  revoked_at: null,
  secrets: [],
};
const USAGE: Usage = { promptTokens: 12, completionTokens: 30, cachedPromptTokens: 0, reasoningTokens: 0 };

/** A real nats-server with its store on disk, killed and started again on the same port and store. */
describe('budget ledger - on a real NATS', { skip: !natsServerOnPath() && 'nats-server is not installed' }, () => {
  const storeDir = mkdtempSync(join(tmpdir(), 'cortex-ledger-'));
  let server: LocalNatsServer;
  let nc: NatsConnection;
  let ledger: BudgetLedger;

  before(async () => {
    server = await startNatsServer({ storeDir });
    nc = await connectBus({ url: server.url, name: 'budget-ledger-spec' });
    const bucket = new LimitsBucket(new BusClient(nc));
    await bucket.onModuleInit();
    const config = new CortexConfig();
    config.billing.currency = 'EUR';
    ledger = new BudgetLedger(bucket, new FinalWrites(), config);
    ledger.onModuleInit();
  });

  after(async () => {
    ledger?.onApplicationShutdown();
    await nc?.close();
    await server?.stop();
    rmSync(storeDir, { recursive: true, force: true });
  });

  it('budget ledger - a request that ends while NATS is down is charged once NATS is back on the same store', async () => {
    const admitted = await ledger.reserve(KEY, undefined, 'req-outage', { tokens: 500, money: null, model: 'm' });
    assert.equal(admitted.kind, 'admit');
    const exited = once(server.process, 'exit');
    server.process.kill('SIGKILL');
    await exited;
    // Away longer than a KV operation waits (5 s): the settlement's first write fails, and the
    // ledger tries again until NATS is back.
    const settling = admitted.settle({ tokens: USAGE.promptTokens + USAGE.completionTokens, money: 0 });
    await new Promise((done) => setTimeout(done, 6_500));
    server = await startNatsServer({ port: server.port, storeDir });
    await settling;
    assert.deepEqual(await ledger.usage(KEY), {
      token_budget: { spent: 42, reserved: 0, period: 'all' },
      money_budget: null,
    });
  });

  it(
    "budget ledger - a money budget reserves the priced bound, is charged the records' cost, " +
      'and refuses once spent naming spent, limit and currency',
    async () => {
      // 0.001 EUR is 1,000,000 billionths: a request bounded at 600,000 billionths is admitted twice.
      const key: KeyRecord = {
        ...KEY,
        id: 'key_money',
        name: 'money',
        limits: { money_budget: { amount: 0.001, window: 'month' }, token_budget: { tokens: 10_000, window: 'day' } },
      };
      const ask = { tokens: 300, money: 600_000, model: 'priced' };
      const first = await ledger.reserve(key, undefined, 'req-m1', ask);
      const second = await ledger.reserve(key, undefined, 'req-m2', ask);
      assert.deepEqual([first.kind, second.kind], ['admit', 'admit']);
      const during = await ledger.usage(key);
      assert.deepEqual(during.money_budget, {
        spent: 0,
        reserved: 0.0012,
        period: during.money_budget?.period,
        currency: 'EUR',
      });
      assert.match(during.money_budget?.period ?? '', /^\d{4}-\d{2}$/);
      assert.deepEqual(during.token_budget?.reserved, 600);
      // Only reserved by running requests: worth a retry once they settle.
      const held = await ledger.reserve(key, undefined, 'req-m3', ask);
      assert.equal(held.kind, 'refuse');
      if (held.kind === 'refuse') {
        assert.equal(held.error.code, 'rate_limit_exceeded');
        assert.match(
          held.error.message,
          /^rate limit reached \(money budget\): the key key_money \("money"\) has 0\.001 EUR of its budget left, all reserved by running requests \(0\.0012 reserved\)/,
        );
      }
      if (first.kind === 'admit') await first.settle({ tokens: 40, money: 555_555 });
      if (second.kind === 'admit') await second.settle({ tokens: 45, money: 555_555 });
      const after = await ledger.usage(key);
      assert.deepEqual([after.money_budget?.spent, after.money_budget?.reserved], [0.00111111, 0]);
      assert.deepEqual([after.token_budget?.spent, after.token_budget?.reserved], [85, 0]);
      const spent = await ledger.reserve(key, undefined, 'req-m4', { ...ask, money: 1 });
      assert.equal(spent.kind, 'refuse');
      if (spent.kind === 'refuse') {
        assert.equal(spent.error.code, 'insufficient_quota');
        assert.equal(spent.retryAfterMs, null);
        assert.match(
          spent.error.message,
          /^the key key_money \("money"\) has used its money budget: 0\.00111111 of 0\.001 EUR spent this month \(UTC\) \(it resets at \d{4}-\d{2}-01T00:00:00\.000Z\)$/,
        );
      }
      // The token budget's reservation taken at the same time was given back.
      assert.equal((await ledger.usage(key)).token_budget?.reserved, 0);
    },
  );

  it(
    'budget ledger - under a money budget a model without a price is refused (403) ' +
      'before anything is reserved; without one it is served',
    async () => {
      const key: KeyRecord = {
        ...KEY,
        id: 'key_unpriced',
        name: 'unpriced',
        limits: { money_budget: { amount: 5, window: 'balance' }, token_budget: { tokens: 1_000, window: 'balance' } },
      };
      const refused = await ledger.reserve(key, undefined, 'req-u', { tokens: 10, money: null, model: 'free-model' });
      assert.equal(refused.kind, 'refuse');
      if (refused.kind === 'refuse') {
        assert.equal(refused.error.status, 403);
        assert.equal(refused.error.extra.param, 'model');
        assert.match(
          refused.error.message,
          /has a money budget, and the model "free-model" has no price in the catalogue/,
        );
      }
      assert.deepEqual(
        (await ledger.usage(key)).token_budget,
        { spent: 0, reserved: 0, period: 'all' },
        'nothing was reserved in the token budget either',
      );
      const tokensOnly = await ledger.reserve(
        { ...key, id: 'key_tokens_only', limits: { token_budget: { tokens: 1_000, window: 'balance' } } },
        undefined,
        'req-t',
        { tokens: 10, money: null, model: 'free-model' },
      );
      assert.equal(tokensOnly.kind, 'admit');
    },
  );
});
