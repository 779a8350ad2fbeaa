import { once } from 'node:events';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startNatsServer } from '@cortex/bus';

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
 * A fresh NATS server with JetStream for one test file, never shared: testcontainers when a Docker
 * engine is reachable, otherwise a local `nats-server` on a free port with a temp store.
 */
export async function startTestNats(options: TestNatsOptions = {}): Promise<TestNats> {
  // A config file needs the local binary: the container would need the file copied in.
  if (!options.configFile && dockerReachable() && process.env.CORTEX_TEST_NATS !== 'local') {
    try {
      const { GenericContainer, Wait } = await import('testcontainers');
      const container = await new GenericContainer('nats:2-alpine')
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
    } catch {
      // No usable engine behind the socket: fall through to a local server.
    }
  }
  const storeDir = mkdtempSync(join(tmpdir(), 'cortex-nats-'));
  const serverOptions = { ...(options.configFile && { configFile: options.configFile }), ...(options.env && { env: options.env }) };
  let server = await startNatsServer({ storeDir, ...serverOptions });
  return {
    url: server.url,
    kind: 'local',
    stop: async () => {
      await server.stop();
      rmSync(storeDir, { recursive: true, force: true });
    },
    kill: async () => {
      const child = server.process;
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGKILL');
      await exited;
    },
    restart: async () => {
      server = await startNatsServer({ port: server.port, storeDir, ...serverOptions });
    },
    pid: () => server.process.pid,
  };
}
