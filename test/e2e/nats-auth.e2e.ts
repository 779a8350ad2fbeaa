import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execSync, spawnSync } from 'node:child_process';
import { promisify } from 'node:util';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { parseAllDocuments } from 'yaml';
import { connect, errors, type ConnectionOptions, type NatsConnection } from '@nats-io/transport-node';
import { encodeAccount, encodeOperator, encodeUser, fmtCreds } from '@nats-io/jwt';
import { createAccount, createOperator, createUser } from '@nats-io/nkeys';
import {
  BusClient,
  connectBus,
  EventPublisher,
  startNatsServer,
  type LocalNatsServer,
  type NatsAuth,
} from '@cortex/bus';
import {
  decodeFleetView,
  decodeLoadResult,
  EVENTS_STREAM,
  streamSubject,
  workerSubject,
  Subjects,
  type FleetView,
  type LoadCommand,
} from '@cortex/contracts';
import { fixtureModel } from '@cortex/fixtures';
import { startStack, fixtureEntry, scrapeMetrics, waitFor, type TestStack } from '@cortex/testing';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';

const run = promisify(execFile);
const ROOT = resolve(fileURLToPath(new URL('../../..', import.meta.url)));
const SERVER_CONFIG = resolve(ROOT, 'deploy/nats/nats-server.conf');
const WORKER = 'worker-cpu0';
const chat = fixtureModel('cortex-chat');
const LOAD: LoadCommand = { model: 'cortex-chat', source: 'fixture:cortex-chat', contextSize: 512, slots: 1 };

/** One user per role, as in deploy/nats/nats-server.conf; passwords are fresh for every run. */
const ROLES = ['router', 'translator', 'metrics', 'gateway', 'admin', WORKER, 'worker-cpu', 'worker-gpu0'] as const;
const passwords = Object.fromEntries(ROLES.map((role) => [role, randomBytes(12).toString('hex')])) as Record<
  (typeof ROLES)[number],
  string
>;
const passwordVariable = (role: string): string => `CORTEX_NATS_${role.replace(/-/g, '_').toUpperCase()}_PASSWORD`;

const serviceEnv = (role: (typeof ROLES)[number]): Record<string, string> => ({
  CORTEX_NATS_USER: role,
  CORTEX_NATS_PASSWORD: passwords[role],
  CORTEX_NATS_INBOX_PREFIX: `_INBOX.${role}`,
});

/** A request whose publish the server refused (nats.js wraps the server's -ERR in a RequestError). */
const refusedPublish = (error: Error): boolean =>
  error instanceof errors.RequestError &&
  error.cause instanceof errors.PermissionViolationError &&
  error.cause.operation === 'publish';

/** nats.js options of one role, for test connections. */
const as = (role: (typeof ROLES)[number]): Partial<ConnectionOptions> => ({
  user: role,
  pass: passwords[role],
  inboxPrefix: `_INBOX.${role}`,
});

describe('NATS credentials and per-role permissions e2e', () => {
  let stack: TestStack;
  const extra: NatsConnection[] = [];

  before(async () => {
    stack = await startStack({
      models: [fixtureEntry('cortex-chat', { pinned: true }), fixtureEntry('cortex-loop', { pinned: true })],
      config: { worker: { id: WORKER } },
      natsAuth: {
        // nats-server parses an environment variable as a config value: quoted, a password that starts
        // with a digit stays a string (hex passwords do).
        server: {
          configFile: SERVER_CONFIG,
          env: Object.fromEntries(ROLES.map((role) => [passwordVariable(role), `"${passwords[role]}"`])),
        },
        services: {
          router: serviceEnv('router'),
          translator: serviceEnv('translator'),
          metrics: serviceEnv('metrics'),
          gateway: serviceEnv('gateway'),
          worker: serviceEnv(WORKER),
        },
        observer: as('admin'),
      },
    });
  });

  after(async () => {
    await Promise.all(extra.map((nc) => nc.close()));
    await stack?.stop();
  });

  const open = async (options: Partial<ConnectionOptions>): Promise<NatsConnection> => {
    const nc = await connect({ servers: stack.nats.url, reconnect: false, ...options });
    extra.push(nc);
    return nc;
  };

  it('nats-auth e2e - with one user per role a chat completion streams end to end', async () => {
    const client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    const deltas: string[] = [];
    const stream = client.chat.completions.stream({
      model: 'cortex-chat',
      messages: [{ role: 'user', content: 'Say hello.' }],
    });
    stream.on('content', (delta) => deltas.push(delta));
    const final = await stream.finalChatCompletion();
    assert.equal(final.choices[0]?.message.content, chat.expected.text);
    assert.ok(deltas.length > 1, 'tokens arrive as several deltas');
    // Stored responses live in the translator's KV buckets; the request counter comes through the
    // events stream (gateway publishes, metrics consumes): each role's JetStream rights are enough.
    const stored = await client.responses.create({ model: 'cortex-chat', input: 'Say hello.', store: true });
    assert.equal((await client.responses.retrieve(stored.id)).output_text, chat.expected.text);
    const served = async (): Promise<number> =>
      (await (await fetch(`${stack.metricsUrl}/metrics`)).text())
        .split('\n')
        .filter((line) => line.startsWith('cortex_requests_total{') && line.includes('status="200"'))
        .reduce((sum, line) => sum + Number(line.split(' ').pop()), 0);
    await waitFor(async () => (await served()) === 2, 20_000);
    // Usage records: the gateway creates and publishes into CORTEX_USAGE, metrics replays it. The
    // spend counter (from the records) equals the completion counter (from the request events).
    const counted = async (): Promise<[number, number]> => {
      const lines = (await (await fetch(`${stack.metricsUrl}/metrics`)).text()).split('\n');
      const value = (prefix: string): number =>
        lines.filter((line) => line.startsWith(prefix)).reduce((sum, line) => sum + Number(line.split(' ').pop()), 0);
      return [
        value('cortex_spend_completion_tokens_total{account="",key="",model="cortex-chat"}'),
        value('cortex_completion_tokens_total{model="cortex-chat"'),
      ];
    };
    await waitFor(async () => {
      const [spent, completed] = await counted();
      return spent > 0 && spent === completed;
    }, 10_000).catch(() => undefined);
    const [spent, completed] = await counted();
    assert.ok(spent > 0);
    assert.equal(spent, completed);
    // A body over the server's 1 MiB max_payload crosses the bus through the object store (gateway →
    // translator), here padded with a field the decoder ignores.
    const big = await fetch(`${stack.baseUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'cortex-chat',
        messages: [{ role: 'user', content: 'Say hello.' }],
        padding: 'x'.repeat(1_500_000),
      }),
    });
    assert.equal(big.status, 200, `${await big.clone().text()}\n${stack.logs().slice(-4000)}`);
    assert.equal(
      ((await big.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]?.message.content,
      chat.expected.text,
    );
    // Services log every error the server sends them, so a missing right shows up here.
    assert.doesNotMatch(
      stack.logs(),
      /Permissions Violation|Authorization Violation/i,
      'no service was refused a subject it needs',
    );
  });

  it("nats-auth e2e - a background response runs, streams and is stored with each role's rights", async () => {
    const client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    // The worker publishes into CORTEX_BACKGROUND, the gateway replays it, a translator stores the end.
    const created = await client.responses.create({ model: 'cortex-chat', input: 'Say hello.', background: true });
    const replay = await fetch(`${stack.baseUrl}/v1/responses/${created.id}?stream=true`);
    assert.equal(replay.status, 200);
    assert.match(await replay.text(), /response\.completed/);
    await waitFor(async () => (await client.responses.retrieve(created.id)).status === 'completed', 20_000);
    assert.equal((await client.responses.retrieve(created.id)).output_text, chat.expected.text);
    assert.doesNotMatch(
      stack.logs(),
      /Permissions Violation|Authorization Violation/i,
      'no service was refused a subject it needs',
    );
  });

  it("nats-auth e2e - the web console's feed works with the gateway's rights: live streams, events and recent activity", async () => {
    const controller = new AbortController();
    // Bounded: a feed denied its subscriptions stays open and silent.
    const response = await fetch(`${stack.baseUrl}/admin/console/feed`, {
      signal: AbortSignal.any([controller.signal, AbortSignal.timeout(30_000)]),
    });
    assert.equal(response.status, 200);
    const reader = response.body!.getReader();
    let text = '';
    const until = async (pattern: RegExp): Promise<void> => {
      while (!pattern.test(text)) {
        const { value, done } = await reader.read();
        if (done) throw new Error(`the feed ended before ${pattern}: ${text.slice(-500)}`);
        text += new TextDecoder().decode(value);
      }
    };
    try {
      // The snapshot carries the activity read back from CORTEX_EVENTS (the requests of the tests above).
      await until(/event: snapshot\ndata: .*"requestId"/);
      const client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
      await client.chat.completions.create({
        model: 'cortex-chat',
        messages: [{ role: 'user', content: 'Say hello.' }],
        stream: false,
      });
      await until(/event: finished\n/);
    } finally {
      controller.abort();
    }
    assert.doesNotMatch(
      stack.logs(),
      /Permissions Violation|Authorization Violation/i,
      'no service was refused a subject it needs',
    );
  });

  it('nats-auth e2e - `cortex status` works as the admin user', async () => {
    const cli = join(ROOT, 'apps/cli/dist/main.js');
    // Built-in defaults (no config file in a temp dir), so only the environment names the user.
    const { CORTEX_CONFIG: _config, ...inherited } = process.env;
    const env = { ...inherited, CORTEX_NATS_URL: stack.nats.url, ...serviceEnv('admin') };
    const { stdout } = await run(process.execPath, [cli, 'status', '--json'], { env, cwd: tmpdir(), timeout: 30_000 });
    const report = JSON.parse(stdout) as { services: Array<{ service: string }>; fleet: FleetView | null };
    assert.deepEqual([...new Set(report.services.map((s) => s.service))].sort(), [
      'gateway',
      'metrics',
      'router',
      'translator',
      'worker',
    ]);
    assert.deepEqual(
      report.fleet?.workers.map((w) => w.workerId),
      [WORKER],
    );
  });

  it('nats-auth e2e - a client without credentials, or with a wrong password, cannot connect', async () => {
    await assert.rejects(
      connect({ servers: stack.nats.url, reconnect: false }),
      (error: Error) => error instanceof errors.AuthorizationError,
    );
    await assert.rejects(
      connect({ servers: stack.nats.url, reconnect: false, user: 'router', pass: 'wrong' }),
      (error: Error) => error instanceof errors.AuthorizationError,
    );
  });

  it('nats-auth e2e - nats://user:pass@host URLs carry the credentials, and errors never show the password', async () => {
    const url = new URL(stack.nats.url);
    url.username = 'admin';
    url.password = passwords.admin;
    const nc = await connectBus({ url: url.toString(), name: 'cortex-test', auth: { inboxPrefix: '_INBOX.admin' } });
    extra.push(nc);
    const fleet = await new BusClient(nc, 5_000).request(Subjects.routerFleet, {}, { decode: decodeFleetView });
    assert.deepEqual(
      fleet.workers.map((w) => w.workerId),
      [WORKER],
    );
    url.password = 'not-the-password';
    await assert.rejects(connectBus({ url: url.toString(), name: 'cortex-test' }), (error: Error) => {
      assert.match(error.message, /refused this connection's credentials/);
      assert.ok(!error.message.includes('not-the-password'), error.message);
      return true;
    });
  });

  it('nats-auth e2e - a worker cannot command loads, read token streams or hear another worker', async () => {
    const worker = await open(as(WORKER));
    await assert.rejects(
      worker.request(workerSubject(Subjects.workerLoad, WORKER), JSON.stringify(LOAD), { timeout: 5_000 }),
      (error: Error) => refusedPublish(error),
    );
    const streams = worker.subscribe(Subjects.streamsAll);
    const closed = await streams.closed;
    assert.ok(
      closed instanceof errors.PermissionViolationError && closed.operation === 'subscription',
      `got ${String(closed)}`,
    );
    const other = worker.subscribe(workerSubject(Subjects.workerGenerate, 'worker-gpu0'));
    assert.ok((await other.closed) instanceof errors.PermissionViolationError);
    const replies = worker.subscribe('_INBOX.gateway.>');
    assert.ok((await replies.closed) instanceof errors.PermissionViolationError);
    // The same load from the router's user reaches the worker: the refusal above is the permission.
    const router = await open(as('router'));
    const loaded = await new BusClient(router, 60_000).request(workerSubject(Subjects.workerLoad, WORKER), LOAD, {
      decode: decodeLoadResult,
    });
    assert.equal(loaded.model, 'cortex-chat');
  });

  it("nats-auth e2e - another worker's user cannot write a run's stream, change the events stream or speak for another worker: the client and the bill never see it", async () => {
    const forger = await open(as('worker-gpu0'));
    const spy = await open(as('gateway'));
    // Where a live run's tokens go: the subject names the worker the gateway placed it on.
    const seen: string[] = [];
    const streams = spy.subscribe(Subjects.streamsAll, {
      callback: (_error, message) => void seen.push(message.subject),
    });
    await spy.flush();
    const tokensCounted = async (): Promise<number> => {
      const metrics = await scrapeMetrics(stack.metricsUrl);
      return [...metrics]
        .filter(([name]) => name.startsWith('cortex_completion_tokens_total{'))
        .reduce((sum, [, value]) => sum + value, 0);
    };
    const before = await tokensCounted();
    const response = await fetch(`${stack.baseUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'cortex-loop',
        messages: [{ role: 'user', content: 'Hi.' }],
        stream: true,
        max_tokens: 400,
        stream_options: { include_usage: true },
      }),
    });
    await waitFor(() => seen.length > 0, 10_000, 5);
    const subject = seen[0]!;
    assert.match(subject, new RegExp(`^llm\\.stream\\.v1\\.${WORKER}\\.[0-9a-f]+$`));
    const runId = subject.split('.').pop()!;
    const forged = (seq: number) => JSON.stringify({ type: 'text', text: ' INJECTED ', seq });
    const bill = JSON.stringify({
      type: 'finish',
      reason: 'stop',
      seq: 3,
      usage: { promptTokens: 5_000_000, completionTokens: 5_000_000, cachedPromptTokens: 0, reasoningTokens: 0 },
      timings: { ttftMs: 1, promptMs: 1, decodeTokensPerSecond: 1, durationMs: 1, queueMs: 0 },
    });
    // The run's own subject: refused by the server.
    for (const body of [forged(2), bill])
      await assert.rejects(
        forger.request(subject, body, { timeout: 5_000 }),
        (error: Error) => refusedPublish(error),
        'another worker writes the run',
      );
    // Its own id with the run's id: allowed, and read by nobody.
    for (let seq = 0; seq < 20; seq++) forger.publish(streamSubject('worker-gpu0', runId), forged(seq));
    forger.publish(streamSubject('worker-gpu0', runId), bill);
    await forger.flush();
    // Widening the events stream to capture every run (what such a user did before) is refused.
    const info = await (await jetstreamManager(spy)).streams.info(EVENTS_STREAM);
    await assert.rejects(
      forger.request(
        `$JS.API.STREAM.UPDATE.${EVENTS_STREAM}`,
        JSON.stringify({ ...info.config, subjects: [Subjects.eventsAll, Subjects.streamsAll] }),
        { timeout: 5_000 },
      ),
      (error: Error) => refusedPublish(error),
    );
    const text = await response.text();
    streams.unsubscribe();
    assert.doesNotMatch(text, /INJECTED/);
    const usage = [...text.matchAll(/"usage":\{"prompt_tokens":(\d+),"completion_tokens":(\d+)/g)].at(-1);
    assert.ok(usage && Number(usage[2]) <= 400, `the client's usage is the run's own: ${usage?.[0]}`);
    await waitFor(async () => (await tokensCounted()) > before, 10_000);
    const counted = (await tokensCounted()) - before;
    assert.ok(counted <= 400, `the bill counts the run's own tokens only (${counted})`);

    // A load_failed naming worker-cpu0: refused on worker-cpu0's subject, dropped and counted on its own.
    const failed = { model: 'cortex-chat', workerId: WORKER, error: 'forged', at: Date.now(), cancelled: true };
    await assert.rejects(
      jetstream(forger).publish(`${Subjects.modelLoadFailed}.${WORKER}`, JSON.stringify(failed)),
      (error: Error) => /permission|violation|timeout|no responders/i.test(`${error.message} ${String(error.cause)}`),
    );
    await jetstream(forger).publish(`${Subjects.modelLoadFailed}.worker-gpu0`, JSON.stringify(failed));
    await waitFor(
      async () =>
        (await scrapeMetrics(stack.metricsUrl)).get(
          `cortex_forged_events_total{publisher="worker-gpu0",named="${WORKER}"}`,
        ) === 1,
      10_000,
    );
    const metrics = await scrapeMetrics(stack.metricsUrl);
    assert.equal(
      [...metrics].filter(([name]) => name.startsWith('cortex_model_load_failures_total{')).length,
      0,
      'the forged failure is not counted as one',
    );
    // The fleet still serves: no router took the forged cancel for a real one.
    const after = await fetch(`${stack.baseUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'cortex-chat', messages: [{ role: 'user', content: 'Say hello.' }] }),
    });
    assert.equal(after.status, 200);
  });

  it('nats-auth e2e - the router records replication events, and the metrics service counts them', async () => {
    const router = await open(as('router'));
    await new EventPublisher(router).publish(
      Subjects.replicaBlocked,
      { model: 'cortex-chat', reason: 'no_room', at: Date.now() },
      `auth-test.${Date.now()}`,
    );
    await waitFor(
      async () =>
        (await (await fetch(`${stack.metricsUrl}/metrics`)).text()).includes(
          'cortex_replication_blocked_total{model="cortex-chat",reason="no_room"} 1',
        ),
      10_000,
    );
  });

  it('nats-auth e2e - only gateways read token streams; the gateway cannot command loads', async () => {
    const gateway = await open(as('gateway'));
    const own = gateway.subscribe(streamSubject(WORKER, 'req_0123456789abcdef01234567'));
    await gateway.flush();
    assert.equal(own.isClosed(), false);
    await assert.rejects(
      gateway.request(workerSubject(Subjects.workerLoad, WORKER), JSON.stringify(LOAD), { timeout: 5_000 }),
      (error: Error) => refusedPublish(error),
    );
    for (const role of ['admin', 'router', 'translator', 'metrics'] as const) {
      const nc = await open(as(role));
      const sub = nc.subscribe(Subjects.streamsAll);
      assert.ok((await sub.closed) instanceof errors.PermissionViolationError, `${role} must not read token streams`);
    }
  });
});

/** A bare nats-server from a config written for one test. */
async function serverWith(dir: string, name: string, conf: string): Promise<LocalNatsServer> {
  const file = join(dir, `${name}.conf`);
  writeFileSync(file, conf);
  return startNatsServer({ storeDir: join(dir, `${name}-store`), configFile: file });
}

/** Connects as a cortex service does, checks the connection carries traffic, closes it. */
async function roundTrip(url: string, auth: NatsAuth): Promise<void> {
  const nc = await connectBus({ url, name: 'cortex-test', auth });
  try {
    const sub = nc.subscribe('auth.check', { max: 1 });
    nc.publish('auth.check', 'ping');
    for await (const msg of sub) assert.equal(msg.string(), 'ping');
  } finally {
    await nc.close();
  }
}

describe('NATS token, NKey, creds and TLS e2e', () => {
  let dir: string;
  const servers: LocalNatsServer[] = [];

  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'cortex-nats-auth-'));
  });

  after(async () => {
    await Promise.all(servers.map((server) => server.stop()));
    rmSync(dir, { recursive: true, force: true });
  });

  it('nats-auth e2e - the Kubernetes NATS config (shared worker user) is a valid server config', () => {
    const manifest = parseAllDocuments(readFileSync(resolve(ROOT, 'k8s/nats.yaml'), 'utf8')).map(
      (doc) => doc.toJSON() as { kind: string; data?: Record<string, string> },
    );
    // The Secret `nats-tls` is mounted at /etc/nats-tls: a throwaway CA and certificate stand in for it here.
    const tlsDir = join(dir, 'k8s-tls');
    mkdirSync(tlsDir);
    const ssl = (args: string): void => void execSync(`openssl ${args}`, { cwd: tlsDir, stdio: 'ignore' });
    ssl('req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=cortex-test-ca -keyout ca.key -out ca.crt');
    ssl('req -newkey rsa:2048 -nodes -subj /CN=nats -keyout tls.key -out tls.csr');
    ssl('x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -out tls.crt');
    const conf = join(dir, 'k8s-nats.conf');
    const text = manifest.find((doc) => doc.kind === 'ConfigMap')!.data!['nats.conf']!;
    assert.match(text, /\/etc\/nats-tls\/tls\.crt/);
    writeFileSync(conf, text.replaceAll('/etc/nats-tls/', `${tlsDir}/`));
    const env = {
      ...process.env,
      POD_NAME: 'nats-0',
      ...Object.fromEntries(
        ['ROUTER', 'TRANSLATOR', 'METRICS', 'GATEWAY', 'ADMIN', 'WORKER'].map((r) => [
          `CORTEX_NATS_${r}_PASSWORD`,
          '"0pw"',
        ]),
      ),
    };
    const check = spawnSync('nats-server', ['-t', '-c', conf], { env, encoding: 'utf8' });
    assert.equal(check.status, 0, check.stderr);
  });

  it('nats-auth e2e - a token connects from config and from nats://token@host; no token is refused', async () => {
    const token = randomBytes(16).toString('hex');
    const server = await serverWith(dir, 'token', `authorization { token: "${token}" }\n`);
    servers.push(server);
    await roundTrip(server.url, { token });
    await roundTrip(server.url.replace('nats://', `nats://${token}@`), {});
    await assert.rejects(connectBus({ url: server.url, name: 'cortex-test' }), /refused this connection's credentials/);
  });

  it('nats-auth e2e - an NKey user connects with its seed file; another key is refused', async () => {
    const user = createUser();
    const seedFile = join(dir, 'user.nk');
    writeFileSync(seedFile, `${new TextDecoder().decode(user.getSeed())}\n`);
    const server = await serverWith(dir, 'nkey', `authorization { users: [ { nkey: ${user.getPublicKey()} } ] }\n`);
    servers.push(server);
    await roundTrip(server.url, { nkeySeedFile: seedFile });
    const strangerFile = join(dir, 'stranger.nk');
    writeFileSync(strangerFile, createUser().getSeed());
    await assert.rejects(
      connectBus({ url: server.url, name: 'cortex-test', auth: { nkeySeedFile: strangerFile } }),
      /refused/,
    );
  });

  it('nats-auth e2e - a .creds file (user JWT signed by an account of an operator) connects', async () => {
    const operator = createOperator();
    const account = createAccount();
    const user = createUser();
    // The server runs JetStream, which needs a system account.
    const system = createAccount();
    const operatorJwt = await encodeOperator('cortex-op', operator, { system_account: system.getPublicKey() });
    const systemJwt = await encodeAccount('SYS', system, {}, { signer: operator });
    // An account JWT without limits allows no connections at all; -1 is unlimited.
    const limits = { conn: -1, subs: -1, data: -1, payload: -1, imports: -1, exports: -1, leaf: -1, wildcards: true };
    const accountJwt = await encodeAccount('cortex', account, { limits }, { signer: operator });
    const userJwt = await encodeUser('gateway', user, account);
    const credsFile = join(dir, 'gateway.creds');
    writeFileSync(credsFile, fmtCreds(userJwt, user));
    const conf = `operator: ${operatorJwt}\nresolver: MEMORY\nsystem_account: ${system.getPublicKey()}\nresolver_preload: { ${account.getPublicKey()}: ${accountJwt}, ${system.getPublicKey()}: ${systemJwt} }\n`;
    const server = await serverWith(dir, 'creds', conf);
    servers.push(server);
    await roundTrip(server.url, { credsFile });
    const forged = join(dir, 'forged.creds');
    writeFileSync(forged, fmtCreds(await encodeUser('gateway', user, createAccount()), user));
    await assert.rejects(connectBus({ url: server.url, name: 'cortex-test', auth: { credsFile: forged } }), /refused/);
  });

  it('nats-auth e2e - TLS with a private CA and client certificates; no client certificate is refused', async () => {
    const ssl = (args: string): void => void execSync(`openssl ${args}`, { cwd: dir, stdio: 'ignore' });
    ssl('req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=cortex-test-ca -keyout ca.key -out ca.pem');
    for (const [name, ext] of [
      ['server', 'subjectAltName=IP:127.0.0.1,DNS:localhost'],
      ['client', 'extendedKeyUsage=clientAuth'],
    ] as const) {
      ssl(`req -newkey rsa:2048 -nodes -subj /CN=${name} -keyout ${name}.key -out ${name}.csr`);
      writeFileSync(join(dir, `${name}.ext`), `${ext}\n`);
      ssl(
        `x509 -req -in ${name}.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 -extfile ${name}.ext -out ${name}.pem`,
      );
    }
    const server = await serverWith(
      dir,
      'tls',
      `tls { cert_file: "${join(dir, 'server.pem')}", key_file: "${join(dir, 'server.key')}", ca_file: "${join(dir, 'ca.pem')}", verify: true }\n`,
    );
    servers.push(server);
    const tls = { caFile: join(dir, 'ca.pem'), certFile: join(dir, 'client.pem'), keyFile: join(dir, 'client.key') };
    await roundTrip(server.url, { tls });
    await roundTrip(server.url.replace('nats://', 'tls://'), { tls });
    // The server drops a handshake without a client certificate; nats.js reports it as a connect timeout.
    await assert.rejects(
      connectBus({ url: server.url, name: 'cortex-test', auth: { tls: { caFile: join(dir, 'ca.pem') } } }),
      /cannot reach NATS/,
    );
    // And the client checks the server: without the private CA the server's certificate is not trusted.
    await assert.rejects(
      connectBus({
        url: server.url,
        name: 'cortex-test',
        auth: { tls: { certFile: join(dir, 'client.pem'), keyFile: join(dir, 'client.key') } },
      }),
      /cannot reach NATS/,
    );
  });
});
