import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { freePort, natsReachable, type ServicePing } from '@cortex/bus';
import { fixtureModel } from '@cortex/fixtures';
import { waitFor } from '@cortex/testing';

const CLI = resolve(fileURLToPath(new URL('../../../apps/cli/dist/main.js', import.meta.url)));

/** PATH without any directory that holds a nats-server, so that the launcher has to fetch its own. */
const PATH_WITHOUT_NATS = [dirname(process.execPath), ...(process.env.PATH ?? '').split(delimiter)]
  .filter((entry) => entry && !existsSync(join(entry, 'nats-server')))
  .join(delimiter);

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
  let metricsUrl: string;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'cortex-launcher-'));
    const [natsPort, port, metricsPort] = [await freePort(), await freePort(), await freePort()];
    natsUrl = `nats://127.0.0.1:${natsPort}`;
    baseUrl = `http://127.0.0.1:${port}`;
    metricsUrl = `http://127.0.0.1:${metricsPort}`;
    const config = {
      gateway: { listen: `127.0.0.1:${port}` },
      metrics: { listen: `127.0.0.1:${metricsPort}` },
      nats: { url: natsUrl },
      worker: { threads: 1, gpu: 'cpu', heartbeat_ms: 250 },
      models: [{ id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: 512, pinned: true }],
    };
    writeFileSync(join(dir, 'cortex.yaml'), JSON.stringify(config));
    // Pretty as on a terminal (log_format unset there): the banner and one readable line per record.
    env = { ...process.env, CORTEX_CONFIG: join(dir, 'cortex.yaml'), NO_COLOR: '1', CORTEX_LOG_FORMAT: 'pretty' };
    delete env.CORTEX_NATS_URL;
  });

  after(() => {
    if (launcher && launcher.exitCode === null) launcher.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });

  /** The first line `cortex serve gateway` prints while it waits for a NATS that is not there. */
  const firstLine = async (command: string, args: string[]): Promise<string> => {
    const childEnv: NodeJS.ProcessEnv = { ...env, CORTEX_NATS_URL: `nats://127.0.0.1:${await freePort()}` };
    delete childEnv.CORTEX_LOG_FORMAT; // unset: the format follows stdout
    const child = spawn(command, args, { cwd: dir, env: childEnv });
    let out = '';
    child.stdout?.on('data', (chunk: Buffer) => (out += chunk.toString()));
    try {
      await waitFor(() => out.includes('cannot reach NATS'), 15_000);
    } finally {
      child.kill('SIGKILL');
    }
    return out.split(/\r?\n/).find((line) => line.includes('cannot reach NATS')) ?? '';
  };

  it('launcher - logs are JSON when stdout is not a terminal, and readable lines on a terminal', async (t) => {
    const piped = await firstLine(process.execPath, [CLI, 'serve', 'gateway']);
    assert.deepEqual(Object.keys(JSON.parse(piped) as object).sort(), ['level', 'msg', 'pid', 'service', 'time']);
    if (spawnSync('script', ['--version']).status !== 0) return t.skip('no `script` to give the process a terminal');
    const terminal = await firstLine('script', ['-qfec', `"${process.execPath}" "${CLI}" serve gateway`, '/dev/null']);
    assert.match(terminal, /^\[\d\d:\d\d:\d\d\] WARN: gateway: cannot reach NATS at nats:\/\/127\.0\.0\.1:\d+/);
  });

  it('launcher - without nats-server, nor apt-get to fetch it with, it says what to run', () => {
    const result = spawnSync(process.execPath, [CLI, 'serve'], {
      cwd: dir,
      env: { ...env, PATH: dirname(process.execPath) },
      encoding: 'utf8',
    });
    assert.equal(result.status, 1);
    assert.match(
      result.stderr,
      /no NATS at nats:\/\/127\.0\.0\.1:\d+ and nats-server is not installed: install your distribution's nats-server package \(Alpine: `apk add nats-server`/,
    );
    assert.equal(existsSync(join(dir, '.cortex/bin/nats-server')), false);
  });

  it('launcher - fetches nats-server when none is installed, starts NATS and all five services, serves a chat, and `cortex status` sees them', async (t) => {
    assert.equal(
      await natsReachable(natsUrl, 300),
      false,
      'nothing listens on the NATS port before the launcher starts',
    );
    assert.notEqual(
      spawnSync('nats-server', ['--version'], { env: { PATH: PATH_WITHOUT_NATS } }).status,
      0,
      "no nats-server on the launcher's PATH",
    );
    // The fetch needs Debian's apt-get and dpkg-deb; elsewhere the launcher gets the installed nats-server.
    const debian = spawnSync('apt-get', ['--version'], { env: { PATH: PATH_WITHOUT_NATS } }).status === 0;
    if (!debian) t.diagnostic('no apt-get here: the launcher runs the installed nats-server instead of fetching one');
    launcher = spawn(process.execPath, [CLI, 'serve'], {
      cwd: dir,
      env: debian ? { ...env, PATH: PATH_WITHOUT_NATS } : env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    launcher.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    launcher.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    await waitFor(() => output.includes('cortex is ready'), 180_000).catch((error: Error) => {
      throw new Error(`${error.message}\n${output}`, { cause: error });
    });
    if (debian) {
      assert.match(
        output,
        new RegExp(
          `INFO: launcher: nats-server is not installed: fetching Debian's package into ${join(dir, '.cortex/bin')}`,
        ),
      );
      assert.match(output, /INFO: launcher: fetched nats-server: v\d+\.\d+\.\d+ into /);
      assert.equal(
        spawnSync(join(dir, '.cortex/bin/nats-server'), ['--version']).status,
        0,
        'the fetched nats-server runs',
      );
    }
    assert.match(output, new RegExp(`\\[\\d\\d:\\d\\d:\\d\\d\\] INFO: launcher: started nats-server on ${natsUrl}`));
    // The banner: where to send requests, what is loaded where, metrics, the config file, how to stop.
    assert.match(output, new RegExp(`API +${baseUrl}/v1 `));
    assert.match(output, /models +cortex-chat \(loaded on [\w-]+, pinned\)/);
    assert.match(output, new RegExp(`metrics +${metricsUrl}/metrics`));
    assert.match(output, new RegExp(`config +${join(dir, 'cortex.yaml')}`));
    assert.match(output, /Ctrl-C stops everything/);
    assert.doesNotMatch(output, /RouterExplorer|InstanceLoader/, "Nest's start-up chatter is debug, not info");

    const client = new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    const result = await client.chat.completions.create({
      model: 'cortex-chat',
      messages: [{ role: 'user', content: 'hi' }],
    });
    assert.equal(result.choices[0]?.message.content, fixtureModel('cortex-chat').expected.text);

    const status = spawnSync(process.execPath, [CLI, 'status'], {
      cwd: dir,
      env: { ...env, CORTEX_NATS_URL: natsUrl },
      encoding: 'utf8',
    });
    assert.equal(status.status, 0, status.stderr);
    for (const service of ['gateway', 'router', 'translator', 'metrics', 'worker'])
      assert.match(status.stdout, new RegExp(`\\b${service}\\b`));
    assert.match(status.stdout, /cortex-chat \(ready, 0\/4, 0\)/);
  });

  it('launcher - SIGINT drains and stops every service and the NATS it started', async () => {
    const json = spawnSync(process.execPath, [CLI, 'status', '--json'], {
      cwd: dir,
      env: { ...env, CORTEX_NATS_URL: natsUrl },
      encoding: 'utf8',
    });
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
