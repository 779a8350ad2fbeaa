import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { connect } from '@nats-io/transport-node';

export interface LocalNatsServer {
  url: string;
  port: number;
  process: ChildProcess;
  stop(): Promise<void>;
}

export const NATS_INSTALL_HINT = 'install nats-server (Debian/Ubuntu: apt-get install nats-server; or see https://docs.nats.io) or set CORTEX_NATS_URL to a running server';

export function natsServerOnPath(): boolean {
  return spawnSync('nats-server', ['--version'], { stdio: 'ignore' }).status === 0;
}

/** Whether a NATS server answers at `url` within `timeoutMs`. */
export async function natsReachable(url: string, timeoutMs = 1_000): Promise<boolean> {
  try {
    const nc = await connect({ servers: url, timeout: timeoutMs, reconnect: false });
    await nc.close();
    return true;
  } catch {
    return false;
  }
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

/**
 * Starts a local `nats-server` with JetStream on 127.0.0.1:`port` (a free one when omitted), storing
 * data in `storeDir`, and resolves once it accepts connections.
 */
export async function startNatsServer(options: { port?: number; storeDir: string; log?: (line: string) => void }): Promise<LocalNatsServer> {
  if (!natsServerOnPath()) throw new Error(`nats-server is not on PATH: ${NATS_INSTALL_HINT}`);
  const port = options.port ?? (await freePort());
  mkdirSync(options.storeDir, { recursive: true });
  const child = spawn('nats-server', ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', options.storeDir], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4_000);
  });
  const url = `nats://127.0.0.1:${port}`;
  const deadline = Date.now() + 10_000;
  while (!(await natsReachable(url, 500))) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`nats-server did not start on port ${port}: ${stderr.trim() || 'no output'}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  options.log?.(`started nats-server on ${url} (JetStream in ${options.storeDir})`);
  return {
    url,
    port,
    process: child,
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
        setTimeout(() => child.kill('SIGKILL'), 5_000).unref();
      }),
  };
}
