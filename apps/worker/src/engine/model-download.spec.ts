import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CortexError } from '@cortex/contracts';
import { encodeFixtureModel, encodeSplitGguf, fixtureGguf, ModelHub } from '@cortex/fixtures';
import { ggufProblem, ModelDownload, type ModelDownloadOptions } from './model-download.js';
import { remoteSource } from './model-source.js';

const MODEL = encodeFixtureModel('cortex-chat', 'bytes');

describe('model download', () => {
  let hub: ModelHub;
  let dirs: string[] = [];

  before(async () => {
    hub = await ModelHub.start();
  });
  after(async () => {
    await hub.close();
    await Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true })));
    dirs = [];
  });

  async function freshDir(): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), 'cortex-download-'));
    dirs.push(dir);
    return dir;
  }

  /** A file on the hub under its own path, and a download of it into a new directory. */
  async function setUp(
    name: string,
    bytes = MODEL,
    options: Partial<ModelDownloadOptions> = {},
  ): Promise<{
    path: string;
    dir: string;
    download: (more?: Partial<ModelDownloadOptions>) => ModelDownload;
    lines: string[];
  }> {
    const path = `/org/repo/resolve/main/${name}`;
    hub.serve(path, bytes);
    const dir = await freshDir();
    const lines: string[] = [];
    const source = remoteSource(hub.url(path), {});
    assert.ok(source);
    const download = (more: Partial<ModelDownloadOptions> = {}): ModelDownload =>
      new ModelDownload({ model: 'remote-chat', source, dir, log: (line) => lines.push(line), ...options, ...more });
    return { path, dir, download, lines };
  }

  function failure(pattern: RegExp): (error: unknown) => boolean {
    return (error) => {
      assert.ok(error instanceof CortexError, String(error));
      assert.equal(error.code, 'model_load_failed');
      assert.match(error.message, /remote-chat/);
      assert.match(error.message, pattern);
      return true;
    };
  }

  it('model download - follows a redirect to another host name, checks the ETag SHA-256, and a second run fetches nothing', async () => {
    const { path, download } = await setUp('redirected.gguf');
    hub.redirect(true);
    try {
      const progress: number[] = [];
      const file = await download({ onProgress: ({ bytes }) => progress.push(bytes) }).run();
      assert.deepEqual(await readFile(file), MODEL);
      const served = hub.requests.filter((r) => r.path === path);
      assert.deepEqual(
        served.map((r) => `${r.host} ${r.status}`),
        ['127.0.0.1 302', 'localhost 200'],
      );
      assert.equal(progress.at(-1), MODEL.length);
      assert.equal(existsSync(`${file}.part`) || existsSync(`${file}.lock`), false);
      await download().run();
      assert.equal(hub.requests.filter((r) => r.path === path).length, 2, 'a whole file on disk is not fetched again');
    } finally {
      hub.redirect(false);
    }
  });

  it('model download - a connection dropped halfway is resumed with a range request for the rest', async () => {
    const { path, download, lines } = await setUp('dropped-once.gguf');
    hub.fault(path, 'drop');
    const file = await download().run();
    assert.deepEqual(await readFile(file), MODEL);
    const [first, second] = hub.requests.filter((r) => r.path === path);
    assert.equal(first?.sent, Math.floor(MODEL.length / 2));
    assert.equal(second?.status, 206);
    assert.equal(second?.range, `bytes=${first?.sent}-`);
    assert.equal(second?.sent, MODEL.length - (first?.sent ?? 0));
    assert.ok(
      lines.some((line) => /dropped .* resuming/.test(line)),
      lines.join('\n'),
    );
  });

  it('model download - a download interrupted for good says so, keeps its part file, and the next run resumes from it', async () => {
    const { path, dir, download } = await setUp('interrupted.gguf', MODEL, { attempts: 1 });
    hub.fault(path, 'drop');
    await assert.rejects(download().run(), failure(/connection .* dropped after \d+ of \d+ bytes/));
    const part = join(dir, 'interrupted.gguf.part');
    assert.equal((await stat(part)).size, Math.floor(MODEL.length / 2));
    const file = await download().run();
    assert.deepEqual(await readFile(file), MODEL);
    const last = hub.requests.filter((r) => r.path === path).at(-1);
    assert.ok(last && last.sent < MODEL.length, `the second run fetched ${last?.sent} of ${MODEL.length} bytes`);
  });

  it('model download - 401, 403, 404 and 500 are errors naming the model and the cause', async () => {
    const { path, download } = await setUp('refused.gguf');
    hub.fault(path, 401);
    await assert.rejects(download().run(), failure(/401 \(unauthorized\).*URL it may read/));
    hub.fault(path, 403);
    await assert.rejects(download().run(), failure(/403 \(forbidden\)/));
    hub.fault(path, 404);
    await assert.rejects(download().run(), failure(/404: no such file/));
    hub.fault(path, 500);
    await assert.rejects(download().run(), failure(/500: the server failed/));
    const hf = remoteSource('hf:org/repo/refused.gguf', { HF_ENDPOINT: hub.url() });
    assert.ok(hf);
    hub.fault(path, 401);
    await assert.rejects(
      new ModelDownload({ model: 'remote-chat', source: hf, dir: await freshDir(), log: () => undefined }).run(),
      failure(/set HF_TOKEN/),
    );
  });

  it('model download - a truncated file is deleted, never handed out', async () => {
    const { path, dir, download } = await setUp('truncated.gguf');
    hub.fault(path, 'truncate');
    await assert.rejects(download().run(), failure(/not a usable GGUF .*truncated/));
    assert.equal(existsSync(join(dir, 'truncated.gguf')), false);
    assert.deepEqual(await readFile(await download().run()), MODEL);
  });

  it('model download - a file whose SHA-256 differs from the pinned one is deleted as corrupted', async () => {
    const { download, dir } = await setUp('pinned.gguf', MODEL, { sha256: 'ab'.repeat(32) });
    await assert.rejects(download().run(), failure(/corrupted: its SHA-256 is [0-9a-f]{64}, expected (ab){32}/));
    assert.deepEqual(await Promise.all(['pinned.gguf', 'pinned.gguf.part'].map((f) => existsSync(join(dir, f)))), [
      false,
      false,
    ]);
  });

  it('model download - two downloads of one file into one directory fetch it once', async () => {
    const { path, download } = await setUp('shared.gguf');
    const [a, b] = await Promise.all([download().run(), download().run()]);
    assert.equal(a, b);
    assert.deepEqual(await readFile(a), MODEL);
    assert.equal(hub.requests.filter((r) => r.path === path && !r.range).length, 1);
    assert.equal(hub.sentFor(path), MODEL.length);
  });

  it('model download - a lock left by a process that died is taken over', async () => {
    const { path, dir, download, lines } = await setUp('orphaned.gguf');
    const dead = spawnSync(process.execPath, ['-e', '']).pid;
    await writeFile(
      join(dir, 'orphaned.gguf.lock'),
      JSON.stringify({ pid: dead, host: (await import('node:os')).hostname(), at: Date.now() }),
    );
    assert.deepEqual(await readFile(await download().run()), MODEL);
    assert.ok(
      lines.some((line) => /previous owner is gone/.test(line)),
      lines.join('\n'),
    );
    assert.equal(hub.sentFor(path), MODEL.length);
  });

  it('model download - a split GGUF is every part, and the parts together read back as one model', async () => {
    const parts = encodeSplitGguf(fixtureGguf('cortex-chat', 'bytes'), 2);
    parts.forEach((bytes, i) => hub.serve(`/org/repo/resolve/main/split-0000${i + 1}-of-00002.gguf`, bytes));
    const source = remoteSource(hub.url('/org/repo/resolve/main/split-00002-of-00002.gguf'), {});
    assert.ok(source);
    const dir = await freshDir();
    const file = await new ModelDownload({ model: 'remote-chat', source, dir, log: () => undefined }).run();
    assert.equal(file, join(dir, 'split-00001-of-00002.gguf'));
    assert.deepEqual(await readFile(join(dir, 'split-00002-of-00002.gguf')), parts[1]);
    assert.equal(await ggufProblem([file, join(dir, 'split-00002-of-00002.gguf')]), null);
  });
});
