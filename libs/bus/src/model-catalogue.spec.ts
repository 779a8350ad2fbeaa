import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { parseConfig } from '@cortex/config';
import { CortexError } from '@cortex/contracts';
import { ModelCatalogue } from './model-catalogue.js';
import { startNatsServer, type LocalNatsServer } from './nats-server.js';

const seed = parseConfig({
  models: [
    { id: 'chat', file: 'fixture:cortex-chat', aliases: ['default'] },
    { id: 'embed', file: 'fixture:cortex-embed', kind: 'embedding' },
  ],
});

async function until(check: () => boolean): Promise<void> {
  const deadline = Date.now() + 2_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('the watch did not bring the change within 2 s');
    await new Promise((done) => setTimeout(done, 10));
  }
}

describe('ModelCatalogue (a real nats-server)', () => {
  let server: LocalNatsServer;
  let store: string;
  let nc: NatsConnection;
  const opened: ModelCatalogue[] = [];
  const open = async (config = seed): Promise<ModelCatalogue> => {
    const catalogue = await ModelCatalogue.open(nc, config);
    opened.push(catalogue);
    return catalogue;
  };

  before(async () => {
    store = mkdtempSync(join(tmpdir(), 'cortex-catalogue-'));
    server = await startNatsServer({ storeDir: store });
    nc = await connect({ servers: server.url });
  });

  after(async () => {
    for (const catalogue of opened) catalogue.close();
    await nc?.close();
    await server?.stop();
    rmSync(store, { recursive: true, force: true });
  });

  it(
    'catalogue - the config seeds it; a model added in one process ' +
      'is seen by another, at once by a fresh lookup, then by the watch',
    async () => {
      const [a, b] = [await open(), await open()];
      assert.deepEqual(
        a.models().map((m) => m.id),
        ['chat', 'embed'],
      );
      assert.equal(a.find('default')?.id, 'chat');
      assert.equal(a.origin('chat'), 'config');
      const added = await a.add({ id: 'extra', file: '/models/extra.gguf', context_size: 4096, aliases: ['x'] });
      assert.equal(added.contextSize, 4096);
      assert.equal(added.slots, 4, 'defaults apply as in the config file');
      assert.equal(a.find('x')?.id, 'extra', 'the writer sees its change at once');
      assert.equal((await b.findFresh('extra'))?.file, '/models/extra.gguf');
      await until(() => b.find('x') !== undefined);
      assert.deepEqual(
        b.models().map((m) => m.id),
        ['chat', 'embed', 'extra'],
      );
      assert.equal(b.origin('extra'), 'added');
    },
  );

  it(
    'catalogue - set merges fields (null back to the default) and tells ' +
      'listeners; remove hides a config model from processes opened later',
    async () => {
      const [a, b] = [await open(), await open()];
      const seen: Array<[string, number | null]> = [];
      b.onChange((id, model) => seen.push([id, model?.priority ?? null]));
      const changed = await a.set('chat', { priority: 9, slots: 2 });
      assert.equal(changed.priority, 9);
      assert.deepEqual(changed.aliases, ['default'], 'fields not named stay');
      await until(() => seen.some(([id, priority]) => id === 'chat' && priority === 9));
      assert.equal(b.origin('chat'), 'changed');
      assert.equal((await a.set('chat', { priority: null })).priority, 0);
      await a.remove('embed');
      const later = await open();
      assert.deepEqual(
        later.models().map((m) => m.id),
        ['chat', 'extra'],
      );
      assert.equal(later.find('chat')?.slots, 2);
      await until(() => b.find('embed') === undefined);
    },
  );

  it(
    'catalogue - a name the bucket lacks is a miss for every lookup at once; ' +
      'adding it (here, or elsewhere and seen by the watch) serves it at once',
    async () => {
      const [a, b] = [await open(), await open()];
      const lookups = await Promise.all(Array.from({ length: 8 }, () => a.findFresh('later')));
      assert.deepEqual(
        lookups,
        Array.from({ length: 8 }, () => undefined),
      );
      assert.equal(await b.findFresh('elsewhere'), undefined);
      await a.add({ id: 'later', file: 'fixture:cortex-chat' });
      assert.equal((await a.findFresh('later'))?.id, 'later', 'the writer forgets its miss');
      // An alias given a moment ago elsewhere is found too: the lookup waits for the watch, not for one entry.
      await a.add({ id: 'elsewhere', file: 'fixture:cortex-chat', aliases: ['elsewhere-too'] });
      assert.equal((await b.findFresh('elsewhere-too'))?.id, 'elsewhere');
      for (let i = 0; i < 10; i++) {
        await a.add({ id: `fresh-${i}`, file: 'fixture:cortex-chat', aliases: [`fresh-alias-${i}`] });
        assert.equal((await b.findFresh(`fresh-alias-${i}`))?.id, `fresh-${i}`, `alias ${i}`);
      }
    },
  );

  it('catalogue - two processes adding one id at once: exactly one wins (compare-and-set)', async () => {
    const [a, b] = [await open(), await open()];
    const results = await Promise.allSettled([
      a.add({ id: 'race', file: 'fixture:cortex-chat' }),
      b.add({ id: 'race', file: 'hf:org/repo/race.gguf' }),
    ]);
    assert.equal(results.filter((r) => r.status === 'fulfilled').length, 1);
    const refused = results.find((r) => r.status === 'rejected') as PromiseRejectedResult;
    assert.match((refused.reason as Error).message, /a model race exists already/);
  });

  it('catalogue - bad models are invalid_request naming the field; unknown ids are model_not_found', async () => {
    const a = await open();
    const refusal = async (work: Promise<unknown>, code: string, param: string, message: RegExp): Promise<void> => {
      await assert.rejects(work, (error: unknown) => {
        assert.ok(error instanceof CortexError);
        assert.equal(error.code, code);
        assert.equal(error.extra.param, param);
        assert.match(error.message, message);
        return true;
      });
    };
    await refusal(a.add({ id: 'r', file: 'models/r.gguf' }), 'invalid_request', 'file', /relative path/);
    await refusal(
      a.add({ id: 'r', file: 'fixture:cortex-chat', slots: 0 }),
      'invalid_request',
      'slots',
      /slots: must not be less than 1/,
    );
    await refusal(
      a.add({ id: 'r', file: 'fixture:cortex-chat', min_replicas: 3, max_replicas: 2 }),
      'invalid_request',
      'min_replicas',
      /more than max_replicas/,
    );
    await refusal(
      a.add({ id: 'r', file: 'fixture:cortex-chat', aliases: ['default'] }),
      'invalid_request',
      'aliases',
      /"default" already names the model chat/,
    );
    await refusal(a.set('chat', { id: 'other' }), 'invalid_request', 'id', /cannot change/);
    await refusal(a.set('nope', { slots: 1 }), 'model_not_found', 'model', /The model 'nope' does not exist/);
    await refusal(a.remove('nope'), 'model_not_found', 'model', /available: chat/);
  });
});
