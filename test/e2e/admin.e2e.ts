import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fixtureEntry as fixture, startStack, waitFor, type TestStack } from '@cortex/testing';

const CLI = resolve(fileURLToPath(new URL('../../../apps/cli/dist/main.js', import.meta.url)));

describe('admin surface e2e', () => {
  let stack: TestStack;

  before(async () => {
    stack = await startStack({
      models: [fixture('cortex-chat'), fixture('cortex-reasoning'), fixture('cortex-tools')],
      config: { auth: { api_keys: ['sk-user'], admin_keys: ['sk-admin'] }, worker: { id: 'w1', heartbeat_ms: 100 } },
    });
  });

  after(async () => {
    await stack?.stop();
  });

  const admin = async (path: string, body?: unknown) => {
    const response = await fetch(`${stack.baseUrl}/admin/${path}`, {
      method: body === undefined ? 'GET' : 'POST',
      headers: { authorization: 'Bearer sk-admin', 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };

  const catalogue = async () => {
    const models = (await admin('fleet')).body.catalogue as Array<{ id: string; loaded: boolean; pinned: boolean }>;
    return new Map(models.map((m) => [m.id, m]));
  };

  const cli = (...args: string[]) =>
    spawnSync(process.execPath, [CLI, ...args], {
      env: { ...process.env, CORTEX_NATS_URL: stack.nats.url },
      encoding: 'utf8',
    });

  it('admin - load and unload over HTTP with an admin key', async () => {
    const loaded = await admin('load', { model: 'cortex-reasoning', worker: 'w1' });
    assert.equal(loaded.status, 200);
    assert.deepEqual(loaded.body, { model: 'cortex-reasoning', workerId: 'w1', coldStart: true });
    await waitFor(async () => (await catalogue()).get('cortex-reasoning')?.loaded === true, 3_000);
    const unloaded = await admin('unload', { model: 'cortex-reasoning' });
    assert.deepEqual(unloaded.body, { model: 'cortex-reasoning', unloaded: ['w1'] });
    await waitFor(async () => (await catalogue()).get('cortex-reasoning')?.loaded === false, 3_000);
    const again = await admin('unload', { model: 'cortex-reasoning' });
    assert.equal(again.status, 404);
    assert.match(String((again.body.error as { message: string }).message), /cortex-reasoning is not loaded/);
    const unknown = await admin('load', { model: 'nope' });
    assert.equal(unknown.status, 404);
  });

  it('admin - pinning a model loads it and shows it pinned; unpin clears it', async () => {
    assert.equal((await admin('pin', { model: 'cortex-tools' })).status, 200);
    await waitFor(async () => {
      const entry = (await catalogue()).get('cortex-tools');
      return entry?.pinned === true && entry.loaded;
    }, 5_000);
    await admin('unpin', { model: 'cortex-tools' });
    await waitFor(async () => (await catalogue()).get('cortex-tools')?.pinned === false, 3_000);
  });

  it('admin - the cortex CLI does the same over the bus: a sentence for people, the router answer with --json', async () => {
    const load = cli('load', 'cortex-chat', '--worker', 'w1', '--json');
    assert.equal(load.status, 0, load.stderr);
    assert.equal((JSON.parse(load.stdout) as { workerId: string }).workerId, 'w1');
    const again = cli('load', 'cortex-chat');
    assert.equal(again.status, 0, again.stderr);
    assert.equal(again.stdout, 'cortex-chat is already loaded on worker w1.\n');
    const models = cli('models');
    assert.equal(models.status, 0, models.stderr);
    assert.match(models.stdout, /cortex-chat\s+yes\s+1 \(1-any\)\s+w1:ready/);
    const unload = cli('unload', 'cortex-chat');
    assert.equal(unload.status, 0, unload.stderr);
    assert.equal(unload.stdout, 'Unloaded cortex-chat from worker w1.\n');
    const coldLoad = cli('load', 'cortex-chat');
    assert.equal(coldLoad.stdout, 'Loaded cortex-chat on worker w1.\n', coldLoad.stderr);
    assert.deepEqual(JSON.parse(cli('unload', 'cortex-chat', '--json').stdout), {
      model: 'cortex-chat',
      unloaded: ['w1'],
    });
    const bad = cli('load');
    assert.equal(bad.status, 2);
    assert.equal(bad.stderr, 'cortex load needs <model>; run "cortex load --help" to see its usage\n');
    const unknown = cli('fixtures', '--help', '--out', 'x');
    assert.equal(unknown.status, 0, unknown.stderr);
    assert.match(unknown.stdout, /^usage: cortex fixtures \[<dir>\]/);
    const typo = cli('unload', 'cortex-chat', '--wroker', 'w1');
    assert.equal(typo.status, 2);
    assert.equal(typo.stderr, 'cortex unload: unknown option --wroker; run "cortex unload --help" to see its usage\n');
  });

  it('admin - cortex pin, unpin and unloading a pinned model say what happens next', async () => {
    assert.equal(cli('load', 'cortex-tools').status, 0);
    const pin = cli('pin', 'cortex-tools');
    assert.equal(
      pin.stdout,
      'Pinned cortex-tools: it is loaded now if no worker has it, and is never evicted or unloaded when idle.\n',
      pin.stderr,
    );
    const unload = cli('unload', 'cortex-tools');
    assert.equal(unload.status, 0, unload.stderr);
    assert.equal(
      unload.stdout,
      'Unloaded cortex-tools from worker w1. cortex-tools is pinned, so the router loads it again on a worker within seconds; run `cortex unpin cortex-tools` first to keep it unloaded.\n',
    );
    // What the sentence promised: the router loads it again.
    await waitFor(async () => (await catalogue()).get('cortex-tools')?.loaded === true, 15_000);
    const unpin = cli('unpin', 'cortex-tools');
    assert.equal(
      unpin.stdout,
      'Unpinned cortex-tools: it stays loaded for now, and may be evicted to make room or unloaded when idle.\n',
      unpin.stderr,
    );
    assert.deepEqual(JSON.parse(cli('unpin', 'cortex-tools', '--json').stdout), {
      model: 'cortex-tools',
      pinned: false,
    });
    assert.equal(cli('unload', 'cortex-tools').stdout, 'Unloaded cortex-tools from worker w1.\n');
  });

  it('admin - cortex status --watch shows the fleet changing as it happens', async () => {
    const watcher = spawn(process.execPath, [CLI, 'status', '--watch', '--interval', '200'], {
      env: { ...process.env, CORTEX_NATS_URL: stack.nats.url },
    });
    let out = '';
    watcher.stdout.setEncoding('utf8').on('data', (chunk: string) => (out += chunk));
    try {
      await waitFor(() => out.includes('WORKERS') && out.includes('w1'), 10_000);
      assert.doesNotMatch(out, /cortex-reasoning \(ready/);
      assert.equal(cli('load', 'cortex-reasoning').status, 0);
      await waitFor(
        () => /cortex-reasoning loaded on w1 in \d+ ms/.test(out) && /cortex-reasoning \(ready, 0\/1, 0\)/.test(out),
        10_000,
      );
      assert.equal(cli('unload', 'cortex-reasoning').status, 0);
      await waitFor(() => /cortex-reasoning unloaded from w1 \(admin\)/.test(out), 10_000);
    } finally {
      watcher.kill('SIGINT');
    }
    const [code] = (await once(watcher, 'exit')) as [number | null];
    assert.equal(code, 0, 'Ctrl-C ends the watch cleanly');
  });
});
