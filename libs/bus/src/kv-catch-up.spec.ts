import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kvm, type KV } from '@nats-io/kv';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { CATCH_UP_ASK_INTERVAL_MS, KvCatchUp } from './kv-catch-up.js';
import { watchKv } from './kv-watch.js';
import { startNatsServer, type LocalNatsServer } from './nats-server.js';

describe('KvCatchUp (a real nats-server, writer and watcher on two connections)', () => {
  let server: LocalNatsServer;
  let store: string;
  let writer: NatsConnection;
  let watcher: NatsConnection;

  before(async () => {
    store = mkdtempSync(join(tmpdir(), 'cortex-kv-catch-up-'));
    server = await startNatsServer({ storeDir: store });
    writer = await connect({ servers: server.url });
    watcher = await connect({ servers: server.url });
  });

  after(async () => {
    await writer?.close();
    await watcher?.close();
    await server?.stop();
    rmSync(store, { recursive: true, force: true });
  });

  /** A watched view of `bucket` on the watcher's connection, as a gateway keeps one. */
  async function watchedView(
    bucket: string,
  ): Promise<{ written: KV; view: Map<string, string>; catchUp: KvCatchUp; stop: () => void }> {
    const written = await new Kvm(writer).create(bucket);
    const watched = await new Kvm(watcher).open(bucket);
    const view = new Map<string, string>();
    const catchUp = new KvCatchUp(watched);
    const stop = watchKv(
      watched,
      (entry) => {
        if (entry.operation === 'PUT') view.set(entry.key, entry.string());
        else view.delete(entry.key);
      },
      () => undefined,
      catchUp,
    );
    return { written, view, catchUp, stop };
  }

  /** A catch-up on `bucket` whose bucket requests are counted; nothing watches it (the test reports what it saw). */
  async function countedCatchUp(bucket: string): Promise<{ written: KV; catchUp: KvCatchUp; asked: () => number }> {
    const written = await new Kvm(writer).create(bucket);
    const watched = await new Kvm(watcher).open(bucket);
    let asked = 0;
    const counting = {
      status: () => {
        asked++;
        return watched.status();
      },
    } as unknown as KV;
    return { written, catchUp: new KvCatchUp(counting), asked: () => asked };
  }

  it('kv catch-up - an empty bucket is caught up at once', async () => {
    const { catchUp, stop } = await watchedView('catch_up_empty');
    try {
      assert.equal(await catchUp.caughtUp(1_000), true);
    } finally {
      stop();
    }
  });

  it('kv catch-up - each write made through another connection is in the view once caughtUp says true', async () => {
    const { written, view, catchUp, stop } = await watchedView('catch_up_writes');
    try {
      for (let i = 0; i < 20; i++) {
        await written.put(`key.${i}`, `value ${i}`);
        assert.equal(await catchUp.caughtUp(2_000), true, `write ${i}`);
        assert.equal(view.get(`key.${i}`), `value ${i}`, `write ${i} is in the view`);
      }
      await written.delete('key.3');
      assert.equal(await catchUp.caughtUp(2_000), true);
      assert.equal(view.has('key.3'), false, 'a delete is in the view too');
    } finally {
      stop();
    }
  });

  it('kv catch-up - a watch that does not move ends the wait at its bound with false', async () => {
    const written = await new Kvm(writer).create('catch_up_stalled');
    await written.put('key.a', 'a');
    // Nothing calls saw(): a watch that has not delivered the write.
    const catchUp = new KvCatchUp(await new Kvm(watcher).open('catch_up_stalled'));
    const started = performance.now();
    assert.equal(await catchUp.caughtUp(50), false);
    assert.ok(performance.now() - started < 1_000, 'the wait ended at its bound, not later');
  });

  it('kv catch-up - misses that arrive together share the bucket requests: at most two', async () => {
    const { written, catchUp, asked } = await countedCatchUp('catch_up_shared');
    await written.put('key.a', 'a');
    const revision = (await written.get('key.a'))!.revision;
    const waits = Array.from({ length: 50 }, () => catchUp.caughtUp(2_000));
    catchUp.saw(revision);
    assert.deepEqual(new Set(await Promise.all(waits)), new Set([true]));
    assert.ok(asked() >= 1 && asked() <= 2, `${asked()} requests for 50 misses`);
  });

  it('kv catch-up - misses one after another ask the bucket at most once per interval', async () => {
    const { written, catchUp, asked } = await countedCatchUp('catch_up_flood');
    await written.put('key.a', 'a');
    catchUp.saw((await written.get('key.a'))!.revision);
    const started = performance.now();
    for (let i = 0; i < 100; i++) assert.equal(await catchUp.caughtUp(2_000), true);
    const elapsed = performance.now() - started;
    // Each miss came after the last was answered, so each needed a request of its own: spaced, not shared.
    assert.ok(
      asked() <= Math.floor(elapsed / CATCH_UP_ASK_INTERVAL_MS) + 1,
      `${asked()} requests in ${elapsed.toFixed(0)} ms`,
    );
  });

  it('kv catch-up - a bucket that cannot be asked answers false, it does not throw', async () => {
    const lost = await connect({ servers: server.url });
    const watched = await new Kvm(lost).create('catch_up_lost');
    await watched.put('key.a', 'a');
    await lost.close();
    const catchUp = new KvCatchUp(watched);
    assert.equal(await catchUp.caughtUp(1_000), false);
  });
});
