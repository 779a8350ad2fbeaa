import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { NatsConnection } from '@nats-io/transport-node';
import { BusClient, connectBus, natsServerOnPath, startNatsServer, type LocalNatsServer } from '@cortex/bus';
import type { KeyRecord, Usage } from '@cortex/contracts';
import { BudgetLedger } from './budget-ledger.js';
import { LimitsBucket } from './limits-bucket.js';

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
    ledger = new BudgetLedger(bucket);
    ledger.onModuleInit();
  });

  after(async () => {
    ledger?.onModuleDestroy();
    await nc?.close();
    await server?.stop();
    rmSync(storeDir, { recursive: true, force: true });
  });

  it('budget ledger - a request that ends while NATS is down is charged once NATS is back on the same store', async () => {
    const admitted = await ledger.reserve(KEY, undefined, 'req-outage', 500);
    assert.equal(admitted.kind, 'admit');
    const exited = once(server.process, 'exit');
    server.process.kill('SIGKILL');
    await exited;
    // Away longer than a KV operation waits (5 s): the settlement's first write fails, and the
    // ledger tries again until NATS is back.
    const settling = admitted.settle(USAGE.promptTokens + USAGE.completionTokens);
    await new Promise((done) => setTimeout(done, 6_500));
    server = await startNatsServer({ port: server.port, storeDir });
    await settling;
    assert.deepEqual(await ledger.usage(KEY), { spent: 42, reserved: 0, period: 'all' });
  });
});
