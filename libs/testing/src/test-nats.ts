import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { natsServerOnPath, startNatsServer } from '@cortex/bus';

export interface TestNats {
  url: string;
  /** How it was started: a container or a local nats-server process. */
  kind: 'testcontainers' | 'local';
  stop(): Promise<void>;
  /** Local servers only: SIGKILLs the server (a crash), resolving once the process is gone. */
  kill?(): Promise<void>;
  /** Local servers only: starts it again on the same port and JetStream store, after `kill`. */
  restart?(): Promise<void>;
  /** Local servers only: the server's process id (for CPU accounting in benchmarks). */
  pid?(): number | undefined;
}

/** SIGKILLs a server process (a crash), resolving once it is gone. */
export async function crash(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGKILL');
  await exited;
}

function dockerReachable(): boolean {
  return Boolean(process.env.DOCKER_HOST) || existsSync('/var/run/docker.sock');
}

export interface TestNatsOptions {
  /** A nats-server config file (e.g. deploy/nats/nats-server.conf); starts a local nats-server. */
  configFile?: string;
  /** Environment for the server, e.g. the passwords the config file reads. */
  env?: Record<string, string>;
}

/**
 * Where the server runs. `CORTEX_TEST_NATS=testcontainers` asks for a container
 * (`CORTEX_TEST_NATS_IMAGE`, default nats:2-alpine), `local` for the nats-server binary. Otherwise the
 * local binary when it is on PATH: it starts at once, where a container would first try to pull its
 * image, which takes long or fails on a machine without an image registry. Only without a local
 * binary does a reachable Docker engine get the job.
 */
function useContainer(options: TestNatsOptions): boolean {
  const wanted = process.env.CORTEX_TEST_NATS;
  if (wanted === 'testcontainers') {
    if (options.configFile)
      throw new Error(
        'CORTEX_TEST_NATS=testcontainers cannot start a server with a config file; unset it for this suite',
      );
    return true;
  }
  if (wanted === 'local' || options.configFile) return false;
  return !natsServerOnPath() && dockerReachable();
}

async function startContainer(): Promise<TestNats> {
  const { GenericContainer, Wait } = await import('testcontainers');
  const container = await new GenericContainer(process.env.CORTEX_TEST_NATS_IMAGE ?? 'nats:2-alpine')
    .withCommand(['-js'])
    .withExposedPorts(4222)
    .withWaitStrategy(Wait.forLogMessage(/Server is ready/))
    .start();
  return {
    url: `nats://${container.getHost()}:${container.getMappedPort(4222)}`,
    kind: 'testcontainers',
    stop: async () => {
      await container.stop();
    },
  };
}

/**
 * A fresh NATS server with JetStream for one test file, never shared: a local `nats-server` on a free
 * port with a temp store, or a container through testcontainers (see useContainer).
 */
export async function startTestNats(options: TestNatsOptions = {}): Promise<TestNats> {
  if (useContainer(options)) return startContainer();
  const storeDir = mkdtempSync(join(tmpdir(), 'cortex-nats-'));
  const serverOptions = {
    ...(options.configFile && { configFile: options.configFile }),
    ...(options.env && { env: options.env }),
  };
  let server = await startNatsServer({ storeDir, ...serverOptions });
  return {
    url: server.url,
    kind: 'local',
    stop: async () => {
      await server.stop();
      rmSync(storeDir, { recursive: true, force: true });
    },
    kill: () => crash(server.process),
    restart: async () => {
      server = await startNatsServer({ port: server.port, storeDir, ...serverOptions });
    },
    pid: () => server.process.pid,
  };
}
