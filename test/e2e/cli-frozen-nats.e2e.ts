import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CONNECT_TIMEOUT_MS } from '@cortex/bus';
import { startTestNats, type TestNats } from '@cortex/testing';

const CLI = resolve(fileURLToPath(new URL('../../..', import.meta.url)), 'apps/cli/dist/main.js');
/**
 * Past this a command that has not ended is killed and the test fails: its connect timeout, and ample
 * room for starting node on a busy machine (the bound is on ending at all, not on speed).
 */
const KILL_MS = CONNECT_TIMEOUT_MS + 60_000;
/** Commands run this many at a time: each is a node process of its own. */
const AT_ONCE = 3;

interface Ended {
  args: string[];
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/**
 * Every `cortex` command that talks to the bus, against a nats-server stopped with SIGSTOP: the
 * kernel still accepts its TCP connections, and nothing ever answers on them.
 */
describe('cli e2e (a frozen NATS)', () => {
  let nats: TestNats;
  let dir: string;
  let config: string;

  before(async () => {
    nats = await startTestNats();
    dir = mkdtempSync(join(tmpdir(), 'cortex-cli-frozen-'));
    config = join(dir, 'cortex.yaml');
    writeFileSync(config, JSON.stringify({ nats: { url: nats.url }, log_level: 'warn' }));
    writeFileSync(join(dir, 'keys.yaml'), 'keys: []\n');
  });

  after(async () => {
    const pid = nats?.pid?.();
    if (pid) process.kill(pid, 'SIGCONT');
    await nats?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const run = (args: string[]): Promise<Ended> =>
    new Promise((done) => {
      const child = spawn(process.execPath, [CLI, ...args], {
        env: { ...process.env, CORTEX_CONFIG: config, CORTEX_NATS_URL: nats.url, NO_COLOR: '1' },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      const killer = setTimeout(() => child.kill('SIGKILL'), KILL_MS);
      child.on('exit', (code, signal) => {
        clearTimeout(killer);
        done({ args, code, signal, stdout, stderr });
      });
    });

  it(
    'cli e2e - every command ends by itself within its connect timeout when NATS is frozen',
    { timeout: 600_000 },
    async () => {
      const pid = nats.pid?.();
      assert.ok(pid, 'a local nats-server, which can be stopped');
      process.kill(pid, 'SIGSTOP');
      try {
        const commands = [
          ['status'],
          ['status', '--json'],
          ['models'],
          ['models', 'add', 'frozen-model', 'fixture:cortex-chat'],
          ['models', 'set', 'frozen-model', '--slots', '2'],
          ['models', 'remove', 'frozen-model'],
          ['load', 'cortex-chat'],
          ['unload', 'cortex-chat'],
          ['pin', 'cortex-chat'],
          ['unpin', 'cortex-chat'],
          ['pull', 'cortex-chat', '--all'],
          ['keys', 'create', '--name', 'frozen'],
          ['keys', 'list'],
          ['keys', 'show', 'key_frozen'],
          ['keys', 'update', 'key_frozen', '--name', 'thawed'],
          ['keys', 'rotate', 'key_frozen'],
          ['keys', 'revoke', 'key_frozen'],
          ['keys', 'apply', join(dir, 'keys.yaml')],
          ['accounts', 'list'],
          ['accounts', 'set', 'frozen', '--rpm', '5'],
        ];
        const health = await run(['health']);
        const ended: Ended[] = [];
        for (let i = 0; i < commands.length; i += AT_ONCE)
          ended.push(...(await Promise.all(commands.slice(i, i + AT_ONCE).map(run))));

        // The verdict, printed and exited with, however long NATS stays frozen.
        assert.equal(health.signal, null, `cortex health was killed: ${health.stdout}${health.stderr}`);
        assert.equal(health.code, 4, health.stdout);
        assert.match(health.stdout ?? '', /^degraded: .*\n {2}- NATS is unreachable/s);

        for (const command of ended) {
          const what = `cortex ${command.args.join(' ')}`;
          assert.equal(command.signal, null, `${what} did not end by itself: ${command.stdout}${command.stderr}`);
          assert.equal(command.code, 1, `${what}: ${command.stderr}`);
          assert.match(command.stderr, /cannot reach NATS at nats:\/\/127\.0\.0\.1:\d+ \(.*timeout/i, what);
        }
      } finally {
        process.kill(pid, 'SIGCONT');
      }
      // Thawed, the same server answers again: the frozen attempts left it nothing to choke on.
      const thawed = await run(['health']);
      assert.equal(thawed.signal, null);
      assert.match(thawed.stdout, /NATS|router/);
    },
  );
});
