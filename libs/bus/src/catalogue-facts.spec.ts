import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kvm } from '@nats-io/kv';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { parseConfig } from '@cortex/config';
import { Buckets, factsKey, factsKeyId, type StoredFacts } from '@cortex/contracts';
import { ModelCatalogue } from './model-catalogue.js';
import { startNatsServer, type LocalNatsServer } from './nats-server.js';

const seed = parseConfig({ models: [{ id: 'org/chat:q4', file: 'https://hub.example/chat.gguf' }] });
const record = (over: Partial<StoredFacts> = {}): StoredFacts => ({
  source: 'chat.gguf@512',
  bytes: 21 * 2 ** 20,
  facts: { architecture: 'llama', fileBytes: 4_096 },
  failures: 0,
  at: 1_700_000_000_000,
  workerId: 'w1',
  ...over,
});

async function until(check: () => boolean): Promise<void> {
  const deadline = Date.now() + 2_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('the watch did not bring the change within 2 s');
    await new Promise((done) => setTimeout(done, 10));
  }
}

describe('CatalogueFacts (a real nats-server)', () => {
  let server: LocalNatsServer;
  let store: string;
  let nc: NatsConnection;
  const opened: ModelCatalogue[] = [];
  const open = async (): Promise<ModelCatalogue> => {
    const catalogue = await ModelCatalogue.open(nc, seed);
    opened.push(catalogue);
    return catalogue;
  };

  before(async () => {
    store = mkdtempSync(join(tmpdir(), 'cortex-facts-'));
    server = await startNatsServer({ storeDir: store });
    nc = await connect({ servers: server.url });
  });

  after(async () => {
    for (const catalogue of opened) catalogue.close();
    await nc?.close();
    await server?.stop();
    rmSync(store, { recursive: true, force: true });
  });

  it('catalogue facts - a key of its own per model, whatever characters the id holds', () => {
    assert.equal(factsKeyId(factsKey('org/chat:q4')), 'org/chat:q4');
    assert.match(factsKey('org/chat:q4'), /^facts\.[A-Za-z0-9_-]+$/);
    assert.equal(factsKeyId(Buffer.from('org/chat:q4').toString('base64url')), undefined, "a model's own key");
  });

  it('catalogue facts - written by one process, seen by another through its watch and by one opened later; no model', async () => {
    const [a, b] = [await open(), await open()];
    const heard: string[] = [];
    b.facts.onChange((id) => heard.push(id));
    assert.equal(await a.facts.write('org/chat:q4', () => record()), true);
    assert.deepEqual(a.facts.get('org/chat:q4'), record(), 'the writer sees its write at once');
    await until(() => b.facts.get('org/chat:q4') !== undefined);
    assert.deepEqual(b.facts.get('org/chat:q4'), record());
    assert.deepEqual(heard, ['org/chat:q4']);
    const c = await open();
    assert.deepEqual(c.facts.get('org/chat:q4'), record(), 'read with the bucket at open');
    for (const catalogue of [a, b, c])
      assert.deepEqual(
        catalogue.models().map((m) => m.id),
        ['org/chat:q4'],
        'a facts key is no model',
      );
  });

  it('catalogue facts - a write is decided on what the bucket holds now, not on a lagging view; undefined writes nothing', async () => {
    const [a, b] = [await open(), await open()];
    await a.facts.write('org/chat:q4', () => record({ bytes: 1, source: 'older' }));
    let seen: StoredFacts | undefined;
    // b writes before its watch may have brought a's record: its edit is shown the bucket's.
    const wrote = await b.facts.write('org/chat:q4', (current) => {
      seen = current;
      return undefined;
    });
    assert.equal(wrote, false);
    assert.equal(seen?.source, 'older');
    assert.equal((await b.facts.fresh('org/chat:q4'))?.source, 'older');
  });

  it('catalogue facts - a record this version cannot read is skipped, and the next write replaces it', async () => {
    const a = await open();
    const kv = await new Kvm(nc).open(Buckets.catalogue);
    await kv.put(factsKey('odd'), JSON.stringify({ source: 3 }));
    await kv.put(factsKey('odd-too'), 'not json');
    await a.facts.write('org/chat:q4', () => record({ source: 'marker' }));
    await until(() => a.facts.get('org/chat:q4')?.source === 'marker');
    assert.equal(a.facts.get('odd'), undefined);
    let seen: StoredFacts | undefined = record();
    assert.equal(
      await a.facts.write('odd', (current) => {
        seen = current;
        return record({ source: 'fixed' });
      }),
      true,
    );
    assert.equal(seen, undefined, 'an unreadable record is shown as none');
    assert.equal(a.facts.get('odd')?.source, 'fixed');
  });

  it('catalogue facts - removing a model removes its facts for every process', async () => {
    const [a, b] = [await open(), await open()];
    await a.add({ id: 'gone', file: 'https://hub.example/gone.gguf' });
    await a.facts.write('gone', () => record());
    await until(() => b.facts.get('gone') !== undefined);
    await a.remove('gone');
    assert.equal(await a.facts.fresh('gone'), undefined);
    await until(() => b.facts.get('gone') === undefined);
    assert.equal(b.find('gone'), undefined);
  });
});
