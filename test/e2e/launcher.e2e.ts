import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { freePort, natsReachable, type ServicePing } from '@cortex/bus';
import { fixtureModel } from '@cortex/fixtures';
import { waitFor } from '@cortex/testing';

const CLI = resolve(fileURLToPath(new URL('../../../apps/cli/dist/main.js', import.meta.url)));

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('cortex serve launcher', () => {
  let dir: string;
  let env: NodeJS.ProcessEnv;
  let launcher: ChildProcess;
  let output = '';
  let natsUrl: string;
  let baseUrl: string;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'cortex-launcher-'));
    const [natsPort, port, metricsPort] = [await freePort(), await freePort(), await freePort()];
    natsUrl = `nats://127.0.0.1:${natsPort}`;
    baseUrl = `http://127.0.0.1:${port}`;
    const config = {
      gateway: { listen: `127.0.0.1:${port}` },
      metrics: { listen: `127.0.0.1:${metricsPort}` },
      nats: { url: natsUrl },
      worker: { threads: 1, gpu: 'cpu', heartbeat_ms: 250 },
      models: [{ id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: 512, pinned: true }],
    };
    writeFileSync(join(dir, 'cortex.yaml'), JSON.stringify(config));
    env = { ...process.env, CORTEX_CONFIG: join(dir, 'cortex.yaml'), NO_COLOR: '1' };
    delete env.CORTEX_NATS_URL;
  });

  after(() => {
    if (launcher && launcher.exitCode === null) launcher.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });

  it('launcher - without nats-server on PATH it says how to install it', () => {
    const result = spawnSync(process.execPath, [CLI, 'serve'], { cwd: dir, env: { ...env, PATH: dirname(process.execPath) }, encoding: 'utf8' });
    assert.equal(result.status, 1);
    assert.match(result.stderr, /nats-server is not installed: install nats-server \(Debian\/Ubuntu: apt-get install nats-server/);
  });

  it('launcher - starts NATS and all five services, serves a chat, and `cortex status` sees them', async () => {
    assert.equal(await natsReachable(natsUrl, 300), false, 'nothing listens on the NATS port before the launcher starts');
    launcher = spawn(process.execPath, [CLI, 'serve'], { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] });
    launcher.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    launcher.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    await waitFor(() => output.includes('cortex is ready'), 60_000).catch((error: Error) => {
      throw new Error(`${error.message}\n${output}`, { cause: error });
    });
    assert.match(output, new RegExp(`started nats-server on ${natsUrl}`));

    const client = new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    const result = await client.chat.completions.create({ model: 'cortex-chat', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(result.choices[0]?.message.content, fixtureModel('cortex-chat').expected.text);

    const status = spawnSync(process.execPath, [CLI, 'status'], { cwd: dir, env: { ...env, CORTEX_NATS_URL: natsUrl }, encoding: 'utf8' });
    assert.equal(status.status, 0, status.stderr);
    for (const service of ['gateway', 'router', 'translator', 'metrics', 'worker']) assert.match(status.stdout, new RegExp(`\\b${service}\\b`));
    assert.match(status.stdout, /cortex-chat \(ready, 0\/4, 0\)/);
  });

  it('launcher - SIGINT drains and stops every service and the NATS it started', async () => {
    const json = spawnSync(process.execPath, [CLI, 'status', '--json'], { cwd: dir, env: { ...env, CORTEX_NATS_URL: natsUrl }, encoding: 'utf8' });
    const pids = (JSON.parse(json.stdout) as { services: ServicePing[] }).services.map((s) => s.pid);
    assert.equal(pids.length, 5);
    const exited = new Promise<number | null>((done) => launcher.once('exit', (code) => done(code)));
    launcher.kill('SIGINT');
    assert.equal(await exited, 0);
    for (const pid of pids) assert.equal(alive(pid), false, `service pid ${pid} is gone`);
    assert.equal(await natsReachable(natsUrl, 300), false, 'the launcher stopped its nats-server');
    assert.match(output, /stopped/);
  });
});
