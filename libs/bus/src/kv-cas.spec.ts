import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kvm, type KV } from '@nats-io/kv';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { CortexError } from '@cortex/contracts';
import { CAS_ATTEMPTS, casUpdate } from './kv-cas.js';
import { startNatsServer, type LocalNatsServer } from './nats-server.js';

describe('casUpdate (a real nats-server)', () => {
  let server: LocalNatsServer;
  let store: string;
  let nc: NatsConnection;
  let kv: KV;

  before(async () => {
    store = mkdtempSync(join(tmpdir(), 'cortex-kv-cas-'));
    server = await startNatsServer({ storeDir: store });
    nc = await connect({ servers: server.url });
    kv = await new Kvm(nc).create('cas_spec', { maxValueSize: 64 });
  });

  after(async () => {
    await nc?.close();
    await server?.stop();
    rmSync(store, { recursive: true, force: true });
  });

  const increment = (key: string) =>
    casUpdate(
      kv,
      key,
      (entry) => {
        const next = (entry ? Number(entry.string()) : 0) + 1;
        return { value: String(next), result: next };
      },
      'busy',
    );

  it('kv cas - writers racing on one absent entry (create when it exists) and then on its revision all land, none lost', async () => {
    const first = await Promise.all(Array.from({ length: 5 }, () => increment('counter')));
    assert.deepEqual(first.map(({ result }) => result).sort(), [1, 2, 3, 4, 5], 'each writer saw the writes before it');
    await Promise.all(Array.from({ length: 5 }, () => increment('counter')));
    assert.equal((await kv.get('counter'))?.string(), '10');
  });

  it('kv cas - an edit that writes nothing returns its result and the entry stays', async () => {
    await kv.put('quiet', 'same');
    const before = (await kv.get('quiet'))!.revision;
    const { result, revision } = await casUpdate(kv, 'quiet', (entry) => ({ result: entry?.string() }), 'busy');
    assert.equal(result, 'same');
    assert.equal(revision, null);
    assert.equal((await kv.get('quiet'))!.revision, before);
  });

  it('kv cas - a failure that is not a lost race is thrown at once, not retried', async () => {
    let edits = 0;
    await assert.rejects(
      casUpdate(
        kv,
        'big',
        () => {
          edits++;
          return { value: 'x'.repeat(1024), result: null };
        },
        'busy',
      ),
      (error: Error) => !(error instanceof CortexError) && /size|maximum|exceed/i.test(error.message),
    );
    assert.equal(edits, 1);
    edits = 0;
    await assert.rejects(
      casUpdate(
        kv,
        'refused',
        () => {
          edits++;
          throw new CortexError('invalid_request', 'no');
        },
        'busy',
      ),
      /no/,
    );
    assert.equal(edits, 1);
  });

  it('kv cas - a writer that loses every race gives up with a 503 naming it after CAS_ATTEMPTS reads', async () => {
    await kv.put('hot', 'start');
    const other = await connect({ servers: server.url });
    const rival = await new Kvm(other).open('cas_spec');
    // Another client writes the entry between each read and each write.
    const raced = new Proxy(kv, {
      get(target, name) {
        if (name === 'update')
          return async (key: string, value: string, revision: number) => (
            await rival.put(key, 'rival'),
            target.update(key, value, revision)
          );
        const member = Reflect.get(target, name) as unknown;
        return typeof member === 'function' ? member.bind(target) : member;
      },
    });
    let edits = 0;
    try {
      await assert.rejects(
        casUpdate(
          raced,
          'hot',
          () => {
            edits++;
            return { value: 'mine', result: null };
          },
          'hot is busy',
        ),
        (error: unknown) =>
          error instanceof CortexError && error.message === 'hot is busy' && error.code === 'service_unavailable',
      );
    } finally {
      await other.close();
    }
    assert.equal(edits, CAS_ATTEMPTS);
    assert.equal((await kv.get('hot'))?.string(), 'rival');
  });
});
