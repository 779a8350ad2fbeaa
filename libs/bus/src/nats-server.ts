import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { natsConnectOptions, type NatsAuth } from './nats-auth.js';
import { findNatsServer } from './nats-server-install.js';
import { natsConnect } from './nats-transport.js';

export interface LocalNatsServer {
  url: string;
  port: number;
  process: ChildProcess;
  stop(): Promise<void>;
}

export const NATS_INSTALL_HINT =
  'install nats-server (Debian/Ubuntu: apt-get install nats-server; or ' +
  'see https://docs.nats.io) or set CORTEX_NATS_URL to a running server';

/** Whether a nats-server can be run: on PATH, or fetched earlier into .cortex/bin (see ensureNatsServer). */
export function natsServerOnPath(): boolean {
  return findNatsServer() !== null;
}

/** Whether a NATS server answers at `url` within `timeoutMs` and takes `auth` (credentials in the URL count). */
export async function natsReachable(url: string, timeoutMs = 1_000, auth?: NatsAuth): Promise<boolean> {
  try {
    const nc = await natsConnect({ ...natsConnectOptions(url, auth), timeout: timeoutMs, reconnect: false });
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
      server.close(() =>
        typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port')),
      );
    });
  });
}

/**
 * Starts a local `nats-server` with JetStream on 127.0.0.1:`port` (a free one when omitted), storing
 * data in `storeDir`, and resolves once it accepts connections.
 */
export async function startNatsServer(options: {
  port?: number;
  storeDir: string;
  log?: (line: string) => void;
  /** A server config file (users, permissions, TLS); the port, address and store dir flags win over it. */
  configFile?: string;
  /** Variables the config file reads from the environment (e.g. passwords). */
  env?: Record<string, string>;
}): Promise<LocalNatsServer> {
  const command = findNatsServer();
  if (!command) throw new Error(`nats-server is not on PATH: ${NATS_INSTALL_HINT}`);
  const port = options.port ?? (await freePort());
  mkdirSync(options.storeDir, { recursive: true });
  const config = options.configFile ? ['-c', options.configFile] : [];
  const child = spawn(command, [...config, '-a', '127.0.0.1', '-p', String(port), '-js', '-sd', options.storeDir], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, ...options.env },
  });
  let stderr = '';
  let ready = false;
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4_000);
    // A server that wants credentials or TLS refuses the plain probe below; its log says when it is up.
    ready ||= stderr.includes('Server is ready');
  });
  const url = `nats://127.0.0.1:${port}`;
  const deadline = Date.now() + 10_000;
  while (!ready && !(await natsReachable(url, 500))) {
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
        // A server killed by a signal has no exit code, only a signal code.
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
        setTimeout(() => child.kill('SIGKILL'), 5_000).unref();
      }),
  };
}
