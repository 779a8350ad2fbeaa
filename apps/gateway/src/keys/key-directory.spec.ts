import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { NatsConnection } from '@nats-io/transport-node';
import { BusClient, connectBus, KeyStore, natsServerOnPath, startNatsServer, type LocalNatsServer } from '@cortex/bus';
import { parseConfig } from '@cortex/config';
import { configKeyId, DEFAULT_TIER, hashSecret } from '@cortex/contracts';
import { KEY_CATCH_UP_MS, KeyDirectory } from './key-directory.js';

/** A key and an account the config file declares (auth.keys, auth.accounts). */
const DECLARED_SECRET = 'sk-declared-in-config-0123456789';
const CONFIG = parseConfig({
  auth: {
    keys: [
      {
        name: 'gitops',
        account: 'team-g',
        tier: 3,
        limits: { requests_per_minute: 2 },
        secret_sha256: hashSecret(DECLARED_SECRET),
      },
    ],
    accounts: { 'team-g': { limits: { concurrent_requests: 4 } } },
  },
});

/** The gateway's view of the keys bucket on one connection, keys written on another (as another gateway or the CLI writes them). */
describe('key directory - on a real NATS', { skip: !natsServerOnPath() && 'nats-server is not installed' }, () => {
  const storeDir = mkdtempSync(join(tmpdir(), 'cortex-key-directory-'));
  let server: LocalNatsServer;
  let gateway: NatsConnection;
  let writer: NatsConnection;
  let directory: KeyDirectory;
  let store: KeyStore;

  before(async () => {
    server = await startNatsServer({ storeDir });
    gateway = await connectBus({ url: server.url, name: 'key-directory-spec' });
    writer = await connectBus({ url: server.url, name: 'key-directory-spec-writer' });
    directory = new KeyDirectory(new BusClient(gateway), CONFIG);
    await directory.onModuleInit();
    store = await KeyStore.open(writer);
  });

  after(async () => {
    directory?.onModuleDestroy();
    await gateway?.close();
    await writer?.close();
    await server?.stop();
    rmSync(storeDir, { recursive: true, force: true });
  });

  const create = (name: string) =>
    store.create({ name, account: 'default', limits: {}, models: null, expires_at: null, tier: DEFAULT_TIER });

  it('key directory - a key stored a moment ago elsewhere is known once the view has caught up, every time', async () => {
    for (let i = 0; i < 20; i++) {
      const { key, secret } = await create(`fresh-${i}`);
      const identity = await directory.identifyAfterCatchUp(secret);
      assert.equal(identity?.kind, 'key', `key ${i}`);
      assert.equal(identity.kind === 'key' && identity.principal.key.id, key.id);
    }
  });

  it(
    'key directory - an unknown stored-key secret stays unknown, ' +
      'well within the bound; other secrets are not looked at again',
    async () => {
      const started = performance.now();
      assert.deepEqual(await directory.identifyAfterCatchUp('sk-cortex-not-a-key-of-this-fleet'), { kind: 'unknown' });
      assert.ok(performance.now() - started < KEY_CATCH_UP_MS, 'the view was already current: no wait to the bound');
      assert.equal(directory.identifyAfterCatchUp('sk-some-other-provider'), null);
    },
  );

  it('key directory - a key the config declares is known with its account, tier and limits; its account too', () => {
    const identity = directory.identify(DECLARED_SECRET);
    assert.equal(identity.kind, 'key');
    const { key } = (identity as { principal: { key: { id: string; account: string; tier: number; limits: object } } })
      .principal;
    assert.deepEqual(
      { id: key.id, account: key.account, tier: key.tier, limits: key.limits },
      { id: configKeyId('gitops'), account: 'team-g', tier: 3, limits: { requests_per_minute: 2 } },
    );
    assert.deepEqual(directory.account('team-g')?.limits, { concurrent_requests: 4 });
    assert.equal(directory.identify('sk-declared-in-config-wrong-secret').kind, 'unknown');
  });

  it('key directory - a bad declaration stops the gateway naming the field under auth', async () => {
    const bad = new KeyDirectory(
      new BusClient(gateway),
      parseConfig({
        auth: { keys: [{ name: 'x', limits: { requests_per_minute: -1 }, secret_sha256: hashSecret('s') }] },
      }),
    );
    await assert.rejects(bad.onModuleInit(), /^ConfigError: config: auth\.keys\[0\]\.limits\.requests_per_minute: /);
  });
});
