import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { NatsConnection } from '@nats-io/transport-node';
import { BusClient, connectBus, KeyStore, natsServerOnPath, startNatsServer, type LocalNatsServer } from '@cortex/bus';
import { DEFAULT_TIER } from '@cortex/contracts';
import { KEY_CATCH_UP_MS, KeyDirectory } from './key-directory.js';

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
    directory = new KeyDirectory(new BusClient(gateway));
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

  it('key directory - an unknown stored-key secret stays unknown, well within the bound; other secrets are not looked at again', async () => {
    const started = performance.now();
    assert.deepEqual(await directory.identifyAfterCatchUp('sk-cortex-not-a-key-of-this-fleet'), { kind: 'unknown' });
    assert.ok(performance.now() - started < KEY_CATCH_UP_MS, 'the view was already current: no wait to the bound');
    assert.equal(directory.identifyAfterCatchUp('sk-some-other-provider'), null);
  });
});
