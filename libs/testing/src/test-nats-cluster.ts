import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager, StorageType } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { freePort, startNatsServer, type LocalNatsServer } from '@cortex/bus';
import { crash, type TestNats } from './test-nats.js';
import { waitFor } from './test-stack.js';

export interface ClusterNode {
  /** The server's name (`n0`, `n1`, …), as JetStream reports stream leaders and replicas. */
  name: string;
  url: string;
  /** The monitoring endpoint (`/connz`, `/jsz`). */
  monitorUrl: string;
  /** SIGKILLs the server (a crash), resolving once the process is gone. */
  kill(): Promise<void>;
  /** Names of the client connections on this server (`cortex-gateway`, …). */
  connectionNames(): Promise<string[]>;
}

export interface TestNatsCluster extends TestNats {
  nodes: ClusterNode[];
  /** The node named `name`. */
  node(name: string): ClusterNode;
  /** Every node's URL with `first`'s first, comma-separated: what a client near `first` is given. */
  urlFrom(first: number): string;
}

/**
 * Starts `size` local nats-servers on free ports as one cluster (full-mesh routes, JetStream with its
 * own store per server) and resolves once JetStream has a meta leader, so replicated streams can be
 * created. `url` lists every server.
 */
export async function startTestNatsCluster(size = 3): Promise<TestNatsCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'cortex-nats-cluster-'));
  const ports = await Promise.all(
    Array.from({ length: size }, async () => ({
      client: await freePort(),
      route: await freePort(),
      monitor: await freePort(),
    })),
  );
  const servers: LocalNatsServer[] = [];
  const stopAll = async (): Promise<void> => {
    await Promise.all(servers.map((server) => server.stop()));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    // Each server is remembered as soon as it runs, so a failed start stops the ones that did start.
    await Promise.all(
      ports.map((port, i) => {
        const routes = ports.filter((_, j) => j !== i).map((other) => `nats-route://127.0.0.1:${other.route}`);
        const configFile = join(dir, `n${i}.conf`);
        writeFileSync(
          configFile,
          [
            `server_name: n${i}`,
            `http: "127.0.0.1:${port.monitor}"`,
            `cluster {\n  name: cortex-test\n  listen: "127.0.0.1:${port.route}"\n  routes: [${routes.map((r) => `"${r}"`).join(', ')}]\n}`,
          ].join('\n'),
        );
        return startNatsServer({ port: port.client, storeDir: join(dir, `n${i}`), configFile }).then(
          (server) => void (servers[i] = server),
        );
      }),
    );
    await jetStreamReady(servers.map((s) => s.url));
  } catch (error) {
    await stopAll();
    throw error;
  }
  const nodes = servers.map((server, i): ClusterNode => ({
    name: `n${i}`,
    url: server.url,
    monitorUrl: `http://127.0.0.1:${ports[i]!.monitor}`,
    kill: () => crash(server.process),
    connectionNames: async () => {
      const response = await fetch(`http://127.0.0.1:${ports[i]!.monitor}/connz?limit=1024`, {
        signal: AbortSignal.timeout(2_000),
      });
      const body = (await response.json()) as { connections?: Array<{ name?: string }> };
      return (body.connections ?? []).map((c) => c.name ?? '');
    },
  }));
  const urlFrom = (first: number): string =>
    [...nodes.slice(first), ...nodes.slice(0, first)].map((n) => n.url).join(',');
  return {
    url: urlFrom(0),
    kind: 'local',
    nodes,
    node: (name) => {
      const found = nodes.find((n) => n.name === name);
      if (!found) throw new Error(`no NATS node named ${name}`);
      return found;
    },
    urlFrom,
    stop: stopAll,
  };
}

/**
 * Waits (bounded) until the cluster's JetStream can place a stream on every server: account info
 * answers once a meta leader is elected, but a stream with a copy per server is refused ("no
 * suitable peers for placement") until every server has reported to it, and the services create
 * theirs as they start.
 */
async function jetStreamReady(urls: string[]): Promise<void> {
  const nc = await connect({ servers: urls, timeout: 5_000 });
  const probe = 'CORTEX_CLUSTER_READY';
  try {
    await waitFor(
      async () => {
        try {
          const jsm = await jetstreamManager(nc, { timeout: 2_000 });
          await jsm.streams.add({
            name: probe,
            subjects: ['cortex.cluster.ready'],
            num_replicas: urls.length,
            storage: StorageType.Memory,
          });
          await jsm.streams.delete(probe);
          return true;
        } catch {
          return false;
        }
      },
      30_000,
      250,
    );
  } finally {
    await nc.close();
  }
}
