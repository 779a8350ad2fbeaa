import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import OpenAI from 'openai';
import { Kvm, type KV } from '@nats-io/kv';
import { DeliverPolicy, jetstream } from '@nats-io/jetstream';
import { Buckets, decodeUsageRecord, USAGE_STREAM, type UsageRecord } from '@cortex/contracts';
import { postJson, scrapeMetrics, startStack, waitFor, type TestStack } from '@cortex/testing';

const ADMIN = 'sk-admin-restarts';
const user = [{ role: 'user' as const, content: 'Hi.' }];

interface KeyUse {
  concurrent_requests_running: number;
  requests_remaining: number | null;
  token_budget: { spent: number; reserved: number; period: string } | null;
}

interface Row {
  account?: string | null;
  key_id?: string | null;
  model?: string;
  requests: number;
  prompt_tokens: number;
  cached_prompt_tokens: number;
  completion_tokens: number;
  reasoning_tokens: number;
}

/**
 * Separate processes on a real nats-server whose JetStream store is on disk: two gateways, one
 * router. Each restart (gateways by SIGTERM and by SIGKILL, the router, NATS itself on the same store)
 * must leave every limit of a key where it was.
 */
describe('restarts e2e (limits and spend across restarts of gateways, routers and NATS)', () => {
  let stack: TestStack;
  let second: string;
  let gateways: string[];
  let limitsKv: KV;

  before(async () => {
    stack = await startStack({
      models: [
        { id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: 512, pinned: true, slots: 4 },
        { id: 'cortex-loop', file: 'fixture:cortex-loop', context_size: 4096, pinned: true, slots: 4 },
      ],
      config: {
        auth: { api_keys: ['sk-static-restarts'], admin_keys: [ADMIN] },
        gateway: { stall_timeout_ms: 30_000 },
      },
    });
    gateways = [stack.baseUrl, await stack.spawnGateway()];
    second = new URL(gateways[1]!).host;
    await gatewaysAnswer();
    limitsKv = await new Kvm(stack.nc).open(Buckets.limits);
  });

  after(async () => {
    await stack?.stop();
  });

  const gatewaysAnswer = (): Promise<void> =>
    waitFor(
      async () => {
        for (const base of gateways)
          if (
            (await fetch(`${base}/v1/models`, { headers: { authorization: `Bearer ${ADMIN}` } }).catch(() => null))
              ?.ok !== true
          )
            return false;
        return true;
      },
      60_000,
      100,
    );

  const admin = async (path: string, init: RequestInit = {}, base = gateways[0]!): Promise<Record<string, unknown>> => {
    const response = await fetch(`${base}${path}`, {
      ...init,
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json', ...init.headers },
    });
    const body = (await response.json()) as Record<string, unknown>;
    assert.equal(response.status, 200, JSON.stringify(body));
    return body;
  };
  /** A stored key, made through one gateway's admin API (every gateway serves it at once). */
  const createKey = async (
    name: string,
    limits: Record<string, unknown>,
    account?: string,
  ): Promise<{ id: string; secret: string }> => {
    return (await admin('/admin/keys', {
      method: 'POST',
      body: JSON.stringify({ name, limits, ...(account && { account }) }),
    })) as { id: string; secret: string };
  };
  const keyUse = async (id: string, base = gateways[0]!): Promise<KeyUse> =>
    (await admin(`/admin/keys/${id}`, {}, base)).usage as KeyUse;
  const chat = (base: string, key: string, extra: Record<string, unknown> = {}): Promise<Response> =>
    postJson(
      `${base}/v1/chat/completions`,
      { model: 'cortex-chat', messages: user, max_tokens: 16, ...extra },
      { authorization: `Bearer ${key}` },
    );
  /** Waits until the key holds no reservation, and returns what it has spent. */
  const settled = async (id: string): Promise<number> => {
    let spent = -1;
    await waitFor(
      async () => {
        const budget = (await keyUse(id)).token_budget;
        spent = budget?.spent ?? -1;
        return budget?.reserved === 0;
      },
      20_000,
      100,
    );
    return spent;
  };
  /** The stored limit entries of a key, as the bucket holds them. */
  const entriesOf = async (id: string): Promise<Record<string, unknown>> => {
    const entries: Record<string, unknown> = {};
    for (const name of [`key.${id}`, `tpm.key.${id}`, `budget.key.${id}`]) {
      const found = await limitsKv.get(name);
      entries[name] = found?.operation === 'PUT' ? found.json() : null;
    }
    return entries;
  };

  const gatewayProcesses = (): Array<[string, ChildProcess]> =>
    [...stack.processes].filter(([name]) => name === 'gateway' || name.startsWith('gateway#'));
  const stopProcess = async (name: string, child: ChildProcess, signal: NodeJS.Signals): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((done) => child.once('exit', done));
      child.kill(signal);
      await exited;
    }
    stack.processes.delete(name);
  };
  const restartGateways = async (signal: NodeJS.Signals): Promise<void> => {
    await Promise.all(gatewayProcesses().map(([name, child]) => stopProcess(name, child, signal)));
    stack.spawnService('gateway');
    stack.spawnService('gateway', { CORTEX_LISTEN: second });
    await gatewaysAnswer();
  };
  const restartRouter = async (): Promise<void> => {
    const [name, router] = [...stack.processes].find(([n]) => n === 'router' || n.startsWith('router#'))!;
    await stopProcess(name, router, 'SIGTERM');
    stack.spawnService('router');
    await waitFor(async () => ((await stack.fleet())?.workers.filter((w) => w.up).length ?? 0) >= 1, 30_000);
  };
  const restartNats = async (): Promise<void> => {
    assert.ok(stack.nats.kill && stack.nats.restart, 'a local nats-server');
    await stack.nats.kill();
    await stack.nats.restart();
    await waitFor(
      async () =>
        (await chat(gateways[0]!, 'sk-static-restarts')).status === 200 &&
        (await chat(gateways[1]!, 'sk-static-restarts')).status === 200,
      60_000,
      250,
    );
  };

  it('restarts - rpm, tpm and budget of a key are where they were after gateways (SIGTERM, SIGKILL), the router and NATS restart', async (t) => {
    if (!stack.nats.kill || !stack.nats.restart) return t.skip('needs a local nats-server (not a container)');
    // A key with all three limits, partly used on both gateways.
    const key = await createKey('all-three', {
      requests_per_minute: 30,
      tokens_per_minute: 50_000,
      token_budget: { tokens: 5_000, window: 'balance' },
    });
    const told: number[] = [];
    for (let i = 0; i < 3; i++) {
      const response = await chat(gateways[i % 2]!, key.secret);
      assert.equal(response.status, 200);
      told.push(((await response.json()) as { usage: { total_tokens: number } }).usage.total_tokens);
    }
    const spent = await settled(key.id);
    assert.equal(
      spent,
      told.reduce((a, b) => a + b, 0),
      'the budget charged what the responses reported',
    );
    const stored = await entriesOf(key.id);
    for (const [name, value] of Object.entries(stored)) assert.ok(value, `${name} is stored`);

    // A balance spent: refused as spent, whatever restarts.
    const spentKey = await createKey('spent', { token_budget: { tokens: 50, window: 'balance' } });
    for (let i = 0; i < 20; i++) {
      const status = (await chat(gateways[0]!, spentKey.secret, { max_tokens: 5 })).status;
      if (status === 429 && (await settled(spentKey.id)) >= 50) break;
    }
    const spentBefore = await settled(spentKey.id);
    assert.ok(spentBefore >= 50);

    const phases: Array<[string, () => Promise<void>]> = [
      ['gateways SIGTERM', () => restartGateways('SIGTERM')],
      ['gateways SIGKILL', () => restartGateways('SIGKILL')],
      ['router SIGTERM', restartRouter],
      ['NATS SIGKILL, same store', restartNats],
    ];
    for (const [phase, restart] of phases) {
      // Windows used up just before the restart: one request a minute, and a minute's tokens.
      const rpm = await createKey(`rpm-1 ${phase}`, { requests_per_minute: 1 });
      assert.equal((await chat(gateways[0]!, rpm.secret)).status, 200);
      assert.equal((await chat(gateways[1]!, rpm.secret)).status, 429);
      const tpm = await createKey(`tpm-100 ${phase}`, { tokens_per_minute: 100 });
      // The looping model writes all of its 200 tokens: 2 minutes of a 100-per-minute window.
      const long = await chat(gateways[1]!, tpm.secret, { model: 'cortex-loop', max_tokens: 200 });
      assert.equal(long.status, 200);
      assert.ok(((await long.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens >= 150);
      await waitFor(async () => (await chat(gateways[0]!, tpm.secret)).status === 429, 5_000, 100);

      await restart();

      assert.deepEqual(await entriesOf(key.id), stored, `${phase}: the stored limits of the used key are unchanged`);
      for (const base of gateways) {
        const use = await keyUse(key.id, base);
        assert.deepEqual(
          use.token_budget,
          { spent, reserved: 0, period: 'all' },
          `${phase}: the budget's use on ${base}`,
        );
        assert.equal(use.concurrent_requests_running, 0);
      }
      const refusedRpm = await chat(gateways[1]!, rpm.secret);
      const rpmBody = (await refusedRpm.json()) as { error: { code: string; message: string } };
      assert.deepEqual(
        [refusedRpm.status, rpmBody.error.code, refusedRpm.headers.get('x-ratelimit-remaining-requests')],
        [429, 'rate_limit_exceeded', '0'],
        `${phase}: ${rpmBody.error.message}`,
      );
      assert.match(rpmBody.error.message, /has used its 1 requests per minute/);
      const refusedTpm = await chat(gateways[0]!, tpm.secret);
      const tpmBody = (await refusedTpm.json()) as { error: { code: string; message: string } };
      assert.deepEqual(
        [refusedTpm.status, tpmBody.error.code, refusedTpm.headers.get('x-ratelimit-remaining-tokens')],
        [429, 'rate_limit_exceeded', '0'],
        `${phase}: ${tpmBody.error.message}`,
      );
      assert.match(tpmBody.error.message, /has used its 100 tokens per minute/);
      const client = new OpenAI({ baseURL: `${gateways[1]}/v1`, apiKey: spentKey.secret, maxRetries: 0 });
      await assert.rejects(
        client.chat.completions.create({ model: 'cortex-chat', messages: user, max_tokens: 5 }),
        (error: unknown) =>
          error instanceof OpenAI.RateLimitError &&
          error.code === 'insufficient_quota' &&
          error.headers.get('x-should-retry') === 'false',
        `${phase}: the spent balance is still refused`,
      );
      assert.equal((await keyUse(spentKey.id)).token_budget?.spent, spentBefore);
      console.log(
        `${phase}: limits of the key unchanged (${spent} of 5000 tokens spent), rpm and tpm windows still full, the spent balance still refused`,
      );
    }

    // And it goes on from there: the next request adds exactly its usage.
    const next = await chat(gateways[1]!, key.secret);
    assert.equal(next.status, 200);
    assert.equal(Number(next.headers.get('x-ratelimit-limit-requests')), 30);
    const nextTokens = ((await next.json()) as { usage: { total_tokens: number } }).usage.total_tokens;
    assert.equal(await settled(key.id), spent + nextTokens);
  });

  it('restarts - a load through NATS and gateway restarts: requests in flight finish or end with a clean error; budgets and spend metrics equal the usage records', async (t) => {
    if (!stack.nats.kill || !stack.nats.restart) return t.skip('needs a local nats-server (not a container)');
    const keys = [
      await createKey('load-a', { token_budget: { tokens: 1_000_000 } }, 'restart-a'),
      await createKey('load-b', { token_budget: { tokens: 1_000_000 } }, 'restart-b'),
    ];
    const outcomes: string[] = [];
    /** One request of the load; resolves with what the client saw, never throws. */
    const one = async (key: string, base: string, i: number): Promise<void> => {
      const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0, timeout: 60_000 });
      try {
        if (i % 2 === 0) {
          const reply = await client.chat.completions.create({
            model: 'cortex-chat',
            messages: [{ role: 'user', content: `Load ${i}.` }],
            max_tokens: 16,
          });
          assert.ok(reply.usage);
          outcomes.push('finished');
        } else {
          const stream = await client.chat.completions.create({
            model: 'cortex-loop',
            messages: user,
            max_tokens: 600,
            stream: true,
            stream_options: { include_usage: true },
          });
          let usage = false;
          for await (const chunk of stream) if (chunk.usage) usage = true;
          assert.ok(usage, 'a finished stream ends with its usage');
          outcomes.push('finished');
        }
      } catch (error) {
        // Clean: an error in the API's shape (an HTTP status, or the stream's error event), never a
        // connection cut without a word, a hang, or a 500.
        assert.ok(
          error instanceof OpenAI.APIError && !(error instanceof OpenAI.APIConnectionError),
          `not a clean error: ${String(error)}`,
        );
        assert.ok(
          error.status === undefined || [429, 502, 503, 504].includes(error.status),
          `status ${error.status}: ${error.message}`,
        );
        assert.ok(error.message.length > 0);
        outcomes.push(`${error.status ?? 'stream error'}: ${error.message}`);
      }
    };
    const load = (count: number): Promise<void[]> =>
      Promise.all(
        Array.from({ length: count }, (_, i) =>
          new Promise((done) => setTimeout(done, i * 30)).then(() => one(keys[i % 2]!.secret, gateways[i % 2]!, i)),
        ),
      );

    await load(8);
    // NATS dies under a load in flight and comes back on the same store, after the streams' idle
    // timeout (5 s in the test stack): requests end, and their budgets settle, while it is down.
    const during = load(12);
    await new Promise((done) => setTimeout(done, 400));
    await stack.nats.kill!();
    await new Promise((done) => setTimeout(done, 7_000));
    await stack.nats.restart!();
    await during;
    await waitFor(
      async () =>
        (await chat(gateways[0]!, 'sk-static-restarts')).status === 200 &&
        (await chat(gateways[1]!, 'sk-static-restarts')).status === 200,
      60_000,
      250,
    );
    await load(8);
    // The gateways go (SIGTERM: the requests they hold finish first) between two loads.
    const draining = load(8);
    await new Promise((done) => setTimeout(done, 300));
    await restartGateways('SIGTERM');
    await draining;
    await load(8);
    const counts = outcomes.reduce<Record<string, number>>((all, o) => ({ ...all, [o]: (all[o] ?? 0) + 1 }), {});
    console.log(`load of ${outcomes.length} requests across the restarts: ${JSON.stringify(counts)}`);
    assert.equal(outcomes.length, 44);
    assert.ok(
      outcomes.filter((o) => o === 'finished').length >= 32,
      'the loads before and after the restarts finished',
    );

    // Every reservation settled; each budget charged exactly what its usage records say.
    const records = await waitForRecords(stack);
    for (const key of keys) {
      const spent = await settled(key.id);
      const mine = records.filter((r) => r.key_id === key.id);
      assert.ok(mine.length >= 16);
      const recorded = mine.reduce((sum, r) => sum + r.prompt_tokens + r.completion_tokens, 0);
      console.log(`${key.id}: ${mine.length} usage records, ${recorded} tokens; budget spent ${spent}`);
      assert.equal(spent, recorded, `the budget of ${key.id} equals its ${mine.length} usage records`);
    }
    // The spend counters equal the records' sums (as /admin/usage adds them), series for series.
    const rows = (await admin('/admin/usage?group_by=account,key,model')).data as Row[];
    const expected: Record<string, number> = {};
    for (const row of rows) {
      const labels = `{account="${row.account ?? ''}",key="${row.key_id ?? ''}",model="${row.model}"}`;
      expected[`cortex_spend_cached_prompt_tokens_total${labels}`] = row.cached_prompt_tokens;
      expected[`cortex_spend_completion_tokens_total${labels}`] = row.completion_tokens;
      expected[`cortex_spend_prompt_tokens_total${labels}`] = row.prompt_tokens;
      expected[`cortex_spend_reasoning_tokens_total${labels}`] = row.reasoning_tokens;
    }
    const spendSeries = async (): Promise<Record<string, number>> =>
      Object.fromEntries(
        [...(await scrapeMetrics(stack.metricsUrl))]
          .filter(([name]) => name.startsWith('cortex_spend_'))
          .sort(([a], [b]) => (a < b ? -1 : 1)),
      );
    const sorted = Object.fromEntries(Object.entries(expected).sort(([a], [b]) => (a < b ? -1 : 1)));
    // After a NATS restart the metrics service's ordered consumer can resume only once it misses two
    // idle heartbeats (2.5 s apart): the counters may be behind until then, never wrong after.
    const caughtUp = Date.now();
    await waitFor(async () => JSON.stringify(await spendSeries()) === JSON.stringify(sorted), 90_000, 500).catch(
      () => undefined,
    );
    console.log(`spend counters equal the records ${Date.now() - caughtUp} ms after the records were read`);
    assert.deepEqual(await spendSeries(), sorted);
    const totals = rows.reduce((sum, r) => sum + r.requests, 0);
    assert.equal(totals, records.length, 'the admin API reads every stored record');
  });
});

/** Every record in the usage stream, once its count has stopped growing for a second. */
async function waitForRecords(stack: TestStack): Promise<UsageRecord[]> {
  const js = jetstream(stack.nc);
  const jsm = await js.jetstreamManager();
  let last = -1;
  await waitFor(
    async () => {
      const count = (await jsm.streams.info(USAGE_STREAM)).state.messages;
      const still = count === last;
      last = count;
      return still;
    },
    60_000,
    1_000,
  );
  const consumer = await js.consumers.get(USAGE_STREAM, { deliver_policy: DeliverPolicy.All });
  const records: UsageRecord[] = [];
  const batch = await consumer.fetch({ max_messages: last, expires: 5_000 });
  for await (const message of batch) {
    records.push(decodeUsageRecord(message.json()));
    if (message.info.pending === 0) break;
  }
  assert.equal(records.length, last);
  return records;
}
