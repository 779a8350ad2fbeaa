import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { chmod, chown, mkdir, mkdtemp, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { CanonicalMessage, Usage } from '@cortex/contracts';
import { ensureFixtureModels, FIXTURE_WORDS } from '@cortex/fixtures';
import type { EngineEvent, EngineModel } from './engine.types.js';
import { LlamaEngine } from './llama-engine.js';
import { PromptCache } from './prompt-cache.js';

/** A conversation's first message: its own 400 fixture words (one token each). */
const opening = (seed: number): CanonicalMessage => ({
  role: 'user',
  content: Array.from({ length: 400 }, (_, i) => FIXTURE_WORDS[(seed * 31 + i * 7) % FIXTURE_WORDS.length]).join(' '),
});

/** The real engine on the chat fixture with one slot, so two conversations taking turns overwrite each other's sequence. */
describe('prompt cache', () => {
  let dir: string;
  let paths: Record<string, string>;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'cortex-prompt-cache-'));
    paths = (await ensureFixtureModels(dir)) as Record<string, string>;
  });

  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  async function turn(model: EngineModel, messages: CanonicalMessage[], keepPromptLonger?: boolean): Promise<Usage> {
    const events: EngineEvent[] = [];
    await model.generate({
      request: {
        model: 'cortex-chat',
        messages,
        sampling: { temperature: 0, maxTokens: 4 },
        stream: true,
        ...(keepPromptLonger && { keepPromptLonger }),
      },
      receivedAt: performance.now(),
      signal: new AbortController().signal,
      emit: (event) => events.push(event),
    });
    const finish = events.find((event) => event.type === 'finish');
    assert.ok(finish?.type === 'finish', JSON.stringify(events.at(-1)));
    return finish.usage;
  }

  async function withEngine(
    maxBytes: number,
    work: (model: EngineModel, engine: LlamaEngine, cacheDir: string) => Promise<void>,
    before?: (cacheDir: string) => Promise<void>,
    diskBytes = 0,
  ): Promise<void> {
    const cacheDir = await mkdtemp(join(dir, 'cache-'));
    await before?.(cacheDir);
    const disk = { dir: join(cacheDir, 'disk'), maxBytes: diskBytes };
    const engine = await LlamaEngine.create({
      gpu: 'cpu',
      threads: 1,
      promptCache: { dir: cacheDir, maxBytes, disk },
      log: () => undefined,
    });
    const model = await engine.load({
      id: 'cortex-chat',
      path: paths['cortex-chat'] as string,
      contextSize: 2048,
      slots: 1,
      maxQueue: 4,
    });
    try {
      await work(model, engine, cacheDir);
    } finally {
      await model.dispose();
      await engine.dispose();
    }
  }

  /** The bytes the first conversation's state takes once the second took its sequence. */
  async function stateSize(first: number, second: number): Promise<number> {
    let size = 0;
    await withEngine(64 * 2 ** 20, async (model, engine) => {
      await turn(model, [opening(first)]);
      await turn(model, [opening(second)]);
      size = engine.promptCacheUse()[0]?.bytes ?? 0;
    });
    assert.ok(size > 0, 'a state was kept');
    return size;
  }

  it('prompt cache - a conversation whose sequence another took comes back to its prompt restored, not evaluated again', async () => {
    await withEngine(64 * 2 ** 20, async (model, engine) => {
      const a = [opening(1)];
      const first = await turn(model, a);
      await turn(model, [opening(2)]);
      const back = await turn(model, [
        ...a,
        { role: 'assistant', content: 'the end' },
        { role: 'user', content: 'and then' },
      ]);
      assert.ok(
        back.cachedPromptTokens >= first.promptTokens - 1,
        `cached ${back.cachedPromptTokens} of the ${first.promptTokens} already sent`,
      );
      assert.equal(back.restoredPromptTokens, back.cachedPromptTokens, 'all of it restored from the prompt cache');
      assert.equal(first.restoredPromptTokens, undefined, 'a first turn restores nothing');
      const [memory, ...others] = engine.promptCacheUse();
      assert.ok(
        memory &&
          memory.tier === 'memory' &&
          memory.bytes > 0 &&
          memory.maxBytes === 64 * 2 ** 20 &&
          others.length === 0,
        JSON.stringify(engine.promptCacheUse()),
      );
      const stats = engine.promptCacheStats;
      assert.ok(stats && stats.saved >= 1 && stats.restored === 1, JSON.stringify(stats));
    });
  });

  it('prompt cache - a kept state that cannot be restored (its file gone) is dropped, and the prompt is evaluated whole', async () => {
    await withEngine(64 * 2 ** 20, async (model, engine, cacheDir) => {
      const a = [opening(5)];
      const first = await turn(model, a);
      await turn(model, [opening(6)]);
      const [store] = await readdir(cacheDir);
      for (const file of await readdir(join(cacheDir, store as string)))
        await rm(join(cacheDir, store as string, file));
      const back = await turn(model, [
        ...a,
        { role: 'assistant', content: 'the end' },
        { role: 'user', content: 'and then' },
      ]);
      assert.ok(
        back.promptTokens > first.promptTokens && back.cachedPromptTokens === 0,
        `evaluated whole: ${JSON.stringify(back)}`,
      );
      assert.equal(back.restoredPromptTokens, undefined);
      const stats = engine.promptCacheStats;
      // Kept: the first conversation's state (its file then removed), and the second's before the third turn took its sequence.
      assert.ok(
        stats && stats.failed === 1 && stats.restored === 0 && stats.saved === 2 && stats.dropped === 1,
        `the state that failed is dropped: ${JSON.stringify(stats)}`,
      );
    });
  });

  it('prompt cache - a state its request asked to keep longer is dropped after the others, however old', async () => {
    // One state's size, then a budget for one and a half: the third save must drop one of the first two.
    const size = await stateSize(7, 8);
    const followUp = (a: CanonicalMessage[]): CanonicalMessage[] => [
      ...a,
      { role: 'assistant', content: 'the end' },
      { role: 'user', content: 'and then' },
    ];
    for (const longer of [false, true]) {
      await withEngine(Math.floor(size * 1.5), async (model) => {
        const a = [opening(7)];
        await turn(model, a, longer);
        await turn(model, [opening(8)]);
        await turn(model, [opening(9)]);
        // Kept: the oldest (a, asked to be kept longer) or the newer (b); c holds the sequence.
        const back = await turn(model, followUp(a));
        if (longer)
          assert.ok(
            back.restoredPromptTokens && back.restoredPromptTokens > 300,
            `kept longer, restored: ${JSON.stringify(back)}`,
          );
        else
          assert.equal(
            back.restoredPromptTokens,
            undefined,
            `the least recently used went first: ${JSON.stringify(back)}`,
          );
      });
    }
  });

  it('prompt cache - with a disk tier, what the memory tier cannot hold moves to disk and is restored from there', async () => {
    const size = await stateSize(10, 11);
    // Memory for one state and a half, disk for many: the third save moves the oldest to disk.
    await withEngine(
      Math.floor(size * 1.5),
      async (model, engine, cacheDir) => {
        const a = [opening(10)];
        const first = await turn(model, a);
        await turn(model, [opening(11)]);
        await turn(model, [opening(12)]);
        const [memory, disk] = engine.promptCacheUse();
        assert.ok(
          memory && disk && memory.bytes <= memory.maxBytes && disk.bytes > 0 && disk.tier === 'disk',
          JSON.stringify(engine.promptCacheUse()),
        );
        const [store] = (await readdir(join(cacheDir, 'disk'))).filter((name) =>
          name.startsWith('cortex-prompt-cache-'),
        );
        assert.equal((await readdir(join(cacheDir, 'disk', store as string))).length, 1, 'one state on disk');
        const back = await turn(model, [
          ...a,
          { role: 'assistant', content: 'the end' },
          { role: 'user', content: 'and then' },
        ]);
        assert.ok(
          (back.restoredPromptTokens ?? 0) >= first.promptTokens - 1,
          `restored from disk: ${JSON.stringify(back)}`,
        );
        const stats = engine.promptCacheStats;
        // Moved: the first conversation's state for the third's, the second's for the third's (saved as the first came back).
        assert.ok(
          stats && stats.moved === 2 && stats.restoredFromDisk === 1 && stats.dropped === 0 && stats.failed === 0,
          JSON.stringify(stats),
        );
      },
      undefined,
      64 * 2 ** 20,
    );
  });

  it('prompt cache - without it (or with no room) the conversation that comes back is evaluated again', async () => {
    await withEngine(0, async (model, engine) => {
      const a = [opening(3)];
      await turn(model, a);
      await turn(model, [opening(4)]);
      const back = await turn(model, [
        ...a,
        { role: 'assistant', content: 'the end' },
        { role: 'user', content: 'and then' },
      ]);
      assert.ok(back.cachedPromptTokens < 50, `only the template's start is shared: ${back.cachedPromptTokens}`);
      assert.equal(engine.promptCacheStats, null);
    });
  });

  it(
    'prompt cache - its files stay within the budget (least recently used ' +
      "out), go with the engine, and a killed worker's are removed by the next",
    async () => {
      let cacheDir = '';
      // A worker SIGKILLed left its store behind (no process has this pid).
      const orphan = async (where: string): Promise<void> =>
        void (await mkdir(join(where, 'cortex-prompt-cache-4194303-abc123'), { recursive: true }));
      await withEngine(
        1,
        async (model, engine, where) => {
          cacheDir = where;
          const stores = await readdir(where);
          assert.equal(stores.length, 1, `only this engine's store: ${stores.join(', ')}`);
          for (let seed = 10; seed < 14; seed++) await turn(model, [opening(seed)]);
          const stats = engine.promptCacheStats;
          // The first state shows how big they are; after it none is even written.
          assert.ok(
            stats && stats.saved >= 1 && stats.dropped === stats.saved,
            `a 1-byte budget keeps nothing: ${JSON.stringify(stats)}`,
          );
          assert.deepEqual(await readdir(join(where, stores[0] as string)), []);
        },
        orphan,
      );
      assert.deepEqual(await readdir(cacheDir), [], 'the engine removed its directory');
    },
  );

  it(
    "prompt cache - a dead worker's store this user cannot remove (another " +
      "user's, in a shared /dev/shm) is left alone, and the cache starts",
    async () => {
      const shared = await mkdtemp(join(dir, 'shared-'));
      const theirs = join(shared, 'cortex-prompt-cache-4194302-theirs');
      await mkdir(theirs);
      await writeFile(join(theirs, 'state'), 'kept');
      // Root removes anything it may write to, so the store belongs to another user; anyone else cannot write into a read-only directory.
      if (process.getuid?.() === 0) await chown(theirs, 65534, 65534);
      else await chmod(theirs, 0o500);
      const cache = new PromptCache({ dir: shared, maxBytes: 2 ** 20 });
      try {
        assert.deepEqual(await readdir(theirs), ['state'], "the other user's store is untouched");
        assert.equal((await readdir(shared)).length, 2, 'its own store beside it');
      } finally {
        cache.dispose();
        await chmod(theirs, 0o700);
      }
      assert.ok((await stat(theirs)).isDirectory());
    },
  );
});
