import { spawn, spawnSync, type ChildProcess, type SpawnSyncReturns } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { connect, type ConnectionOptions, type NatsConnection } from '@nats-io/transport-node';
import { BusClient, freePort } from '@cortex/bus';
import { decodeFleetView, Subjects, type FleetView } from '@cortex/contracts';
import { startTestNats, type TestNats, type TestNatsOptions } from './test-nats.js';

const ROOT = resolve(fileURLToPath(new URL('../../..', import.meta.url)));
const CLI = join(ROOT, 'apps/cli/dist/main.js');
export const SHARED_MODELS = resolve(ROOT, '../shared/models');
export const STORIES_260K = join(SHARED_MODELS, 'stories260K.gguf');
/** Llama 2's 32,000-token vocabulary on a tiny model of random weights (../shared/models, vendored by the ollama project). */
export const LLAMA_TINY_RANDOM = join(SHARED_MODELS, 'llama-2-tiny-random.gguf');

export interface StackOptions {
  /** Extra YAML for the `models:` list, one entry per item (snake_case keys). */
  models?: Array<Record<string, unknown>>;
  services?: string[];
  /** Extra top-level YAML sections merged over the defaults. */
  config?: Record<string, unknown>;
  /** A NATS server that wants credentials, and what each process connects with. */
  natsAuth?: StackNatsAuth;
  /** A NATS the caller started (e.g. `startTestNatsCluster`) instead of a fresh server; the stack stops it. */
  nats?: TestNats;
  /** Environment per service name (e.g. its own `CORTEX_NATS_URL`); `spawnService`'s own env wins. */
  serviceEnv?: Record<string, Record<string, string>>;
  /** Node options for every service process, e.g. `--cpu-prof` for a benchmark's profile. */
  nodeArgs?: string[];
}

export interface StackNatsAuth {
  server: TestNatsOptions;
  /** Environment per service name (`CORTEX_NATS_USER`, …); `spawnService`'s own env wins. */
  services: Record<string, Record<string, string>>;
  /** Credentials of the stack's own connection (`nc`), which pings services and asks for the fleet. */
  observer: Partial<ConnectionOptions>;
}

export interface TestStack {
  baseUrl: string;
  metricsUrl: string;
  nats: TestNats;
  /** The stack's config file (JSON), for a test that starts one more service with a variant of it. */
  configPath: string;
  /** A client on the stack's NATS, for tests that watch the bus. */
  nc: NatsConnection;
  processes: Map<string, ChildProcess>;
  logs: () => string;
  /** Starts one more service process (e.g. a second worker with its own id). */
  spawnService(name: string, env?: Record<string, string>): ChildProcess;
  /**
   * Starts one more gateway (on `listen`, host:port, or a free port) and returns its base URL once it
   * answers `/v1/models` with the stack's API key; fails at once if the process exits, else after 60 s.
   */
  spawnGateway(listen?: string): Promise<string>;
  /** A router's view of the fleet, or null when no router answers within a second. */
  fleet(): Promise<FleetView | null>;
  /** Waits until a router sees this many workers up (after `spawnService('worker', …)`). */
  workersUp(count: number): Promise<void>;
  stop(): Promise<void>;
}

/** The fixture catalogue every e2e test can use; generated on first use by the worker. */
export const FIXTURE_CATALOGUE = [
  { id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: 512, pinned: true, slots: 2 },
  { id: 'cortex-reasoning', file: 'fixture:cortex-reasoning', context_size: 512, slots: 2 },
  { id: 'cortex-tools', file: 'fixture:cortex-tools', context_size: 512, slots: 2 },
];

/**
 * A catalogue entry for one generated fixture: context 512, one slot and the byte-level vocabulary
 * (~1 MiB with its context), so memory budgets in MiB force eviction.
 */
export function fixtureEntry(id: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { id, file: `fixture:${id}:bytes`, context_size: 512, slots: 1, ...extra };
}

/**
 * Boots real services as separate processes (`cortex serve <name>`) on a fresh NATS server with a
 * temp config, and waits until the gateway answers and pinned models are ready.
 */
export async function startStack(options: StackOptions = {}): Promise<TestStack> {
  const nats = options.nats ?? (await startTestNats(options.natsAuth?.server));
  const dir = mkdtempSync(join(tmpdir(), 'cortex-stack-'));
  const [port, metricsPort] = [await freePort(), await freePort()];
  const models = options.models ?? FIXTURE_CATALOGUE;
  const config: Record<string, unknown> = {
    gateway: { listen: `127.0.0.1:${port}`, stream_idle_timeout_ms: 5000, keep_alive_ms: 1000 },
    nats: { url: nats.url },
    metrics: { listen: `127.0.0.1:${metricsPort}` },
    worker: { threads: 1, gpu: 'cpu', models_dir: join(dir, 'models'), heartbeat_ms: 250 },
    models,
    log_level: 'warn',
  };
  mergeInto(config, options.config ?? {});
  const configPath = join(dir, 'cortex.yaml');
  writeFileSync(configPath, JSON.stringify(config, null, 2)); // JSON is valid YAML
  let output = '';
  /** Lines where a gateway's run took a step its phase does not allow (see InferenceRun.step): bugs, failed at stop. */
  const refusedSteps: string[] = [];
  const processes = new Map<string, ChildProcess>();
  let counter = 0;
  const spawnService = (name: string, env: Record<string, string> = {}): ChildProcess => {
    const child = spawn(process.execPath, [...(options.nodeArgs ?? []), CLI, 'serve', name], {
      cwd: ROOT,
      env: {
        ...process.env,
        CORTEX_CONFIG: configPath,
        CORTEX_NATS_URL: nats.url,
        NO_COLOR: '1',
        ...options.natsAuth?.services[name],
        ...options.serviceEnv?.[name],
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const collect = (chunk: Buffer): void => {
      const text = chunk.toString();
      output = (output + text).slice(-200_000);
      for (const line of text.split('\n')) if (line.includes(REFUSED_STEP)) refusedSteps.push(line);
    };
    child.stdout?.on('data', collect);
    child.stderr?.on('data', collect);
    processes.set(processes.has(name) ? `${name}#${++counter}` : name, child);
    return child;
  };
  for (const name of options.services ?? ['router', 'translator', 'metrics', 'worker', 'gateway']) spawnService(name);
  const nc = await connect({ servers: nats.url.split(','), ...options.natsAuth?.observer });
  const fleet = (): Promise<FleetView | null> =>
    new BusClient(nc, 1_000).request(Subjects.routerFleet, {}, { decode: decodeFleetView }).catch(() => null);
  const services = options.services ?? ['router', 'translator', 'metrics', 'worker', 'gateway'];
  const auth = options.config?.auth as { api_keys?: string[]; admin_keys?: string[] } | undefined;
  // An admin key is an API key too: a stack configured with admin keys only is asked with one.
  const apiKey = auth?.api_keys?.[0] ?? auth?.admin_keys?.[0];
  const authHeaders: Record<string, string> = apiKey ? { authorization: `Bearer ${apiKey}` } : {};
  const spawnGateway = async (listen?: string): Promise<string> => {
    const address = listen ?? `127.0.0.1:${await freePort()}`;
    const child = spawnService('gateway', { CORTEX_LISTEN: address });
    const base = `http://${address}`;
    await waitFor(async () => {
      if (child.exitCode !== null || child.signalCode !== null)
        throw new Error(
          `the gateway on ${address} exited (${child.exitCode ?? child.signalCode}) before it answered\n${output}`,
        );
      return (await fetch(`${base}/v1/models`, { headers: authHeaders }).catch(() => null))?.ok === true;
    }, 60_000);
    return base;
  };
  const stack: TestStack = {
    baseUrl: `http://127.0.0.1:${port}`,
    metricsUrl: `http://127.0.0.1:${metricsPort}`,
    nats,
    configPath,
    nc,
    processes,
    logs: () => output,
    spawnService,
    spawnGateway,
    fleet,
    workersUp: (count) =>
      waitFor(async () => ((await fleet())?.workers.filter((w) => w.up).length ?? 0) >= count, 30_000),
    stop: async () => {
      await Promise.all(
        [...processes.values()].map(
          (child) =>
            new Promise<void>((done) => {
              if (child.exitCode !== null || child.signalCode !== null) return done();
              child.once('exit', () => done());
              child.kill('SIGTERM');
              setTimeout(() => child.kill('SIGKILL'), 10_000).unref();
            }),
        ),
      );
      await nc.close();
      await nats.stop();
      rmSync(dir, { recursive: true, force: true });
      if (refusedSteps.length > 0)
        throw new Error(`a run took steps its phase does not allow:\n${refusedSteps.slice(0, 10).join('\n')}`);
    },
  };
  try {
    await waitFor(async () => {
      const response = await fetch(`${stack.baseUrl}/v1/models`, { headers: authHeaders }).catch(() => null);
      if (!response?.ok) return false;
      const body = (await response.json()) as { data: Array<{ id: string; loaded: boolean; pinned: boolean }> };
      if (!body.data.filter((m) => m.pinned).every((m) => m.loaded)) return false;
      // Every service must answer before a test's first request, and the router must know the workers.
      const answered = await pingServices(nc);
      if (services.some((name) => (answered.get(name) ?? 0) < services.filter((s) => s === name).length)) return false;
      if (!services.includes('worker')) return true;
      return (
        ((await fleet())?.workers.filter((w) => w.up).length ?? 0) >= services.filter((s) => s === 'worker').length
      );
    }, 60_000);
  } catch (error) {
    await stack.stop().catch(() => undefined);
    throw new Error(`stack did not come up: ${(error as Error).message}\n${output}`, { cause: error });
  }
  return stack;
}

/** What InferenceRun logs when it is asked to take a step its phase does not allow. */
const REFUSED_STEP = 'may not happen while it is';

/** Deep-merges plain objects from `extra` into `target` (arrays and scalars replace). */
function mergeInto(target: Record<string, unknown>, extra: Record<string, unknown>): void {
  for (const [key, value] of Object.entries(extra)) {
    const current = target[key];
    const isPlain = (v: unknown): v is Record<string, unknown> =>
      v !== null && typeof v === 'object' && !Array.isArray(v);
    if (isPlain(current) && isPlain(value)) mergeInto(current, value);
    else target[key] = value;
  }
}

/** How many instances of each service answer the status ping. */
async function pingServices(nc: NatsConnection): Promise<Map<string, number>> {
  const counts = new Map<string, number>();
  try {
    const replies = await nc.requestMany(Subjects.serviceStatus, undefined, { maxWait: 300, strategy: 'timer' });
    for await (const msg of replies) {
      const { service } = msg.json<{ service: string }>();
      counts.set(service, (counts.get(service) ?? 0) + 1);
    }
  } catch {
    // no responders yet
  }
  return counts;
}

/** Runs the `cortex` command line against the stack (its config and NATS), bounded at a minute. */
export function runCli(stack: Pick<TestStack, 'configPath' | 'nats'>, ...args: string[]): SpawnSyncReturns<string> {
  return spawnSync(process.execPath, [CLI, ...args], {
    env: { ...process.env, CORTEX_CONFIG: stack.configPath, CORTEX_NATS_URL: stack.nats.url },
    encoding: 'utf8',
    timeout: 60_000,
  });
}

export async function waitFor(
  check: () => Promise<boolean> | boolean,
  timeoutMs: number,
  intervalMs = 100,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((done) => setTimeout(done, intervalMs));
  }
}

export function storiesAvailable(): boolean {
  return existsSync(STORIES_260K);
}

/** Collects the JSON messages on `subject` (wildcards allowed) from now on, for tests that watch the bus. */
export async function watchBus<T>(
  nc: NatsConnection,
  subject: string,
): Promise<{ messages: T[]; stop: () => Promise<void> }> {
  const messages: T[] = [];
  const sub = nc.subscribe(subject, { callback: (_error, msg) => void messages.push(msg.json<T>()) });
  await nc.flush();
  // Messages the server sent before the flush's pong are read before it resolves: another
  // connection may have seen an event (and the client its answer) before this one read it.
  const stop = async () => {
    if (sub.isClosed()) return;
    await nc.flush().catch(() => undefined);
    sub.unsubscribe();
  };
  return { messages, stop };
}
