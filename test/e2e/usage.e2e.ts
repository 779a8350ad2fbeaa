import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { DeliverPolicy, jetstream } from '@nats-io/jetstream';
import { decodeUsageRecord, USAGE_STREAM, type UsageRecord } from '@cortex/contracts';
import { startStack, waitFor, type TestStack, scrapeMetrics } from '@cortex/testing';

const ADMIN = 'sk-admin-usage-e2e';

interface Spent {
  requests: number;
  prompt: number;
  cached: number;
  completion: number;
}

interface Row {
  account?: string | null;
  key_id?: string | null;
  model?: string;
  day?: string;
  requests: number;
  prompt_tokens: number;
  cached_prompt_tokens: number;
  completion_tokens: number;
  reasoning_tokens: number;
  total_tokens: number;
  cost: number;
  unpriced_requests: number;
}

const scrape = (stack: TestStack): Promise<Map<string, number>> => scrapeMetrics(stack.metricsUrl);

/** Only the `cortex_spend_*` series, with their values. */
function spendSeries(values: Map<string, number>): Record<string, number> {
  return Object.fromEntries(
    [...values].filter(([name]) => name.startsWith('cortex_spend_')).sort(([a], [b]) => (a < b ? -1 : 1)),
  );
}

/** Every record in the usage stream, read straight from JetStream. */
async function storedRecords(stack: TestStack): Promise<UsageRecord[]> {
  const js = jetstream(stack.nc);
  const consumer = await js.consumers.get(USAGE_STREAM, { deliver_policy: DeliverPolicy.All });
  const records: UsageRecord[] = [];
  const info = await (await js.jetstreamManager()).streams.info(USAGE_STREAM);
  if (info.state.messages === 0) return records;
  const batch = await consumer.fetch({ max_messages: info.state.messages, expires: 5_000 });
  for await (const message of batch) {
    records.push(decodeUsageRecord(message.json()));
    if (message.info.pending === 0) break;
  }
  return records;
}

describe('usage records e2e', () => {
  let stack: TestStack;
  const keys: Array<{ id: string; account: string; secret: string }> = [];
  /** What the clients were told they used, by key id. */
  const told = new Map<string, Spent>();

  before(async () => {
    stack = await startStack({
      models: [
        { id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: 512, pinned: true, slots: 4 },
        // The same fixture at a price from the start; cortex-chat is given one at run time.
        {
          id: 'cortex-premium',
          file: 'fixture:cortex-chat',
          context_size: 512,
          slots: 2,
          cost: { input: 30, cached_input: 3, output: 120 },
        },
      ],
      config: { auth: { api_keys: ['sk-static-usage-e2e'], admin_keys: [ADMIN] } },
    });
  });

  after(async () => {
    await stack?.stop();
  });

  const admin = async (
    path: string,
    init: RequestInit = {},
  ): Promise<{ status: number; body: Record<string, unknown> }> => {
    const response = await fetch(`${stack.baseUrl}${path}`, {
      ...init,
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json', ...init.headers },
    });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };
  const usage = async (query: string): Promise<Row[]> => {
    const answer = await admin(`/admin/usage?${query}`);
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    return answer.body.data as Row[];
  };

  it('usage - two keys in two accounts, streamed and not, two APIs: the stored records sum to what the clients were told', async () => {
    for (const account of ['team-a', 'team-b']) {
      const created = await admin('/admin/keys', {
        method: 'POST',
        body: JSON.stringify({ name: `load-${account}`, account }),
      });
      assert.equal(created.status, 200, JSON.stringify(created.body));
      keys.push({ id: created.body.id as string, account, secret: created.body.secret as string });
    }
    const load = keys.flatMap((key) => {
      const spent: Spent = { requests: 0, prompt: 0, cached: 0, completion: 0 };
      told.set(key.id, spent);
      const openai = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: key.secret, maxRetries: 0 });
      const anthropic = new Anthropic({ baseURL: stack.baseUrl, apiKey: key.secret, maxRetries: 0 });
      const add = (prompt: number, cached: number, completion: number): void => {
        spent.requests++;
        spent.prompt += prompt;
        spent.cached += cached;
        spent.completion += completion;
      };
      const one = async (i: number): Promise<void> => {
        const content = `Hi, number ${i}.`;
        const messages = [{ role: 'user' as const, content }];
        switch (i % 4) {
          case 0: {
            const r = await openai.chat.completions.create({ model: 'cortex-chat', messages, max_tokens: 24 });
            assert.ok(r.usage);
            return add(
              r.usage.prompt_tokens,
              r.usage.prompt_tokens_details?.cached_tokens ?? 0,
              r.usage.completion_tokens,
            );
          }
          case 1: {
            const stream = await openai.chat.completions.create({
              model: 'cortex-chat',
              messages,
              max_tokens: 24,
              stream: true,
              stream_options: { include_usage: true },
            });
            let last: OpenAI.CompletionUsage | null | undefined = null;
            for await (const chunk of stream) if (chunk.usage) last = chunk.usage;
            assert.ok(last, 'the stream ends with its usage');
            return add(last.prompt_tokens, last.prompt_tokens_details?.cached_tokens ?? 0, last.completion_tokens);
          }
          case 2: {
            const r = await anthropic.messages.create({ model: 'cortex-chat', max_tokens: 24, messages });
            const cached = r.usage.cache_read_input_tokens ?? 0;
            return add(r.usage.input_tokens + cached, cached, r.usage.output_tokens);
          }
          default: {
            const r = await anthropic.messages
              .stream({ model: 'cortex-chat', max_tokens: 24, messages })
              .finalMessage();
            const cached = r.usage.cache_read_input_tokens ?? 0;
            return add(r.usage.input_tokens + cached, cached, r.usage.output_tokens);
          }
        }
      };
      return Array.from({ length: 8 }, (_, i) => one(i));
    });
    await Promise.all(load);

    // Stored records: one per request, ids distinct, summing to what each client was told.
    await waitFor(async () => (await storedRecords(stack)).length === 16, 10_000);
    const records = await storedRecords(stack);
    assert.equal(new Set(records.map((r) => r.id)).size, 16);
    assert.deepEqual(new Set(records.map((r) => r.api)), new Set(['openai.chat', 'anthropic.messages']));
    assert.deepEqual(new Set(records.map((r) => r.stream)), new Set([true, false]));
    for (const key of keys) {
      const mine = records.filter((r) => r.key_id === key.id);
      const expected = told.get(key.id);
      assert.ok(expected && expected.completion > 0 && expected.prompt > 0);
      assert.ok(mine.every((r) => r.account === key.account));
      assert.deepEqual(
        {
          requests: mine.length,
          prompt: mine.reduce((s, r) => s + r.prompt_tokens, 0),
          cached: mine.reduce((s, r) => s + r.cached_prompt_tokens, 0),
          completion: mine.reduce((s, r) => s + r.completion_tokens, 0),
        },
        expected,
      );
    }

    // The admin API answers from the same records.
    const rows = await usage('group_by=account,key');
    assert.equal(rows.length, 2);
    for (const key of keys) {
      const row = rows.find((r) => r.key_id === key.id);
      const expected = told.get(key.id);
      assert.ok(row && expected);
      assert.deepEqual(
        {
          account: row.account,
          requests: row.requests,
          prompt: row.prompt_tokens,
          cached: row.cached_prompt_tokens,
          completion: row.completion_tokens,
          total: row.total_tokens,
        },
        {
          account: key.account,
          requests: 8,
          prompt: expected.prompt,
          cached: expected.cached,
          completion: expected.completion,
          total: expected.prompt + expected.completion,
        },
      );
    }
    const today = new Date().toISOString().slice(0, 10);
    const teamA = await usage(`account=team-a&from=${today}&to=${today}&group_by=day,model`);
    assert.deepEqual(
      teamA.map((r) => [r.day, r.model, r.requests]),
      [[today, 'cortex-chat', 8]],
    );
    assert.deepEqual(await usage(`account=team-a&to=2020-01-01`), []);
  });

  it('usage - the spend metrics equal the stored records exactly, with the metrics service killed during a load and again after', async () => {
    const expectedSpend = async (): Promise<Record<string, number>> => {
      const expected: Record<string, number> = {};
      for (const row of await usage('group_by=account,key,model')) {
        const labels = `{account="${row.account ?? ''}",key="${row.key_id ?? ''}",model="${row.model}"}`;
        expected[`cortex_spend_cached_prompt_tokens_total${labels}`] = row.cached_prompt_tokens;
        expected[`cortex_spend_completion_tokens_total${labels}`] = row.completion_tokens;
        expected[`cortex_spend_prompt_tokens_total${labels}`] = row.prompt_tokens;
        expected[`cortex_spend_reasoning_tokens_total${labels}`] = row.reasoning_tokens;
      }
      return Object.fromEntries(Object.entries(expected).sort(([a], [b]) => (a < b ? -1 : 1)));
    };
    const killMetrics = async (): Promise<void> => {
      const metrics = stack.processes.get('metrics');
      assert.ok(metrics);
      const exited = new Promise((done) => metrics.once('exit', done));
      metrics.kill('SIGKILL');
      await exited;
      stack.processes.delete('metrics');
    };
    const startMetrics = async (): Promise<void> => {
      stack.spawnService('metrics');
      await waitFor(async () => (await fetch(`${stack.metricsUrl}/readyz`).catch(() => null))?.status === 200, 20_000);
    };

    const before = await expectedSpend();
    assert.equal(Object.keys(before).length, 8, 'four counters for each of the two keys');
    await waitFor(
      async () => JSON.stringify(spendSeries(await scrape(stack))) === JSON.stringify(before),
      10_000,
    ).catch(() => undefined);
    assert.deepEqual(spendSeries(await scrape(stack)), before);

    // A load with the metrics service killed in the middle of it.
    const burst = keys.flatMap((key) => {
      const openai = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: key.secret, maxRetries: 0 });
      return Array.from({ length: 6 }, (_, i) =>
        new Promise((done) => setTimeout(done, i * 40)).then(() =>
          openai.chat.completions.create({
            model: 'cortex-chat',
            messages: [{ role: 'user', content: `Burst ${i}.` }],
            max_tokens: 16,
          }),
        ),
      );
    });
    await new Promise((done) => setTimeout(done, 100));
    await killMetrics();
    const answers = await Promise.all(burst);
    await waitFor(async () => (await storedRecords(stack)).length === 16 + 12, 10_000);
    await startMetrics();
    const during = await expectedSpend();
    const burstCompletion = answers.reduce((sum, r) => sum + (r.usage?.completion_tokens ?? 0), 0);
    const completionOf = (spend: Record<string, number>): number =>
      Object.entries(spend)
        .filter(([name]) => name.startsWith('cortex_spend_completion'))
        .reduce((sum, [, v]) => sum + v, 0);
    assert.equal(
      completionOf(during) - completionOf(before),
      burstCompletion,
      'the records grew by what the burst was told',
    );
    assert.deepEqual(spendSeries(await scrape(stack)), during);

    // And once more, with nothing sent: a restart changes nothing.
    await killMetrics();
    await startMetrics();
    assert.deepEqual(spendSeries(await scrape(stack)), during);
  });

  it('usage - a bad query is a 400 naming the field; a key that is not an admin key is refused', async () => {
    for (const [query, param] of [
      ['group_by=week', 'group_by'],
      ['from=yesterday', 'from'],
      ['from=2026-11-24&to=2026-11-01', 'to'],
    ] as const) {
      const answer = await admin(`/admin/usage?${query}`);
      assert.equal(answer.status, 400, query);
      const error = answer.body.error as { type: string; param: string; message: string };
      assert.equal(error.param, param, JSON.stringify(answer.body));
      assert.match(error.message, new RegExp(`^${param}: `));
    }
    const key = keys[0];
    assert.ok(key);
    const refused = await fetch(`${stack.baseUrl}/admin/usage`, { headers: { authorization: `Bearer ${key.secret}` } });
    assert.ok(refused.status === 401 || refused.status === 403, String(refused.status));
  });

  it('usage - two models at two prices, two keys: the money per key is the sum over the usage records of tokens × price, in /admin/usage and the metrics', async () => {
    assert.equal(keys.length, 2, 'the keys of the first case');
    // A price set at run time applies from the next request on, on every gateway (the live catalogue).
    const priced = await admin('/admin/models/cortex-chat', {
      method: 'PATCH',
      body: JSON.stringify({ cost: { input: 2, output: 10 } }),
    });
    assert.equal(priced.status, 200, JSON.stringify(priced.body));
    const prices: Record<string, { input: number; cached_input?: number; output: number }> = {
      'cortex-chat': { input: 2, output: 10 },
      'cortex-premium': { input: 30, cached_input: 3, output: 120 },
    };
    const from = new Date().toISOString();
    const before = await storedRecords(stack);
    const runs = keys.flatMap((key, k) => {
      const openai = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: key.secret, maxRetries: 0 });
      return ['cortex-chat', 'cortex-premium', 'cortex-premium'].map((model, i) =>
        openai.chat.completions.create({
          model,
          messages: [{ role: 'user', content: `Price check ${k}.${i}.` }],
          max_tokens: 8 + 4 * i,
        }),
      );
    });
    await Promise.all(runs);
    await waitFor(async () => (await storedRecords(stack)).length === before.length + 6, 10_000);
    const fresh = (await storedRecords(stack)).filter((r) => !before.some((b) => b.id === r.id));
    const expected = new Map<string, number>();
    for (const r of fresh) {
      const price = prices[r.model]!;
      const cost =
        ((r.prompt_tokens - r.cached_prompt_tokens) * price.input +
          r.cached_prompt_tokens * (price.cached_input ?? price.input) +
          r.completion_tokens * price.output) /
        1e6;
      expected.set(r.key_id ?? '', (expected.get(r.key_id ?? '') ?? 0) + cost);
    }
    const answer = await admin(`/admin/usage?from=${from}&group_by=key`);
    assert.equal(answer.body.currency, 'USD');
    const rows = answer.body.data as Row[];
    assert.equal(rows.length, 2);
    for (const key of keys) {
      const row = rows.find((r) => r.key_id === key.id)!;
      assert.equal(row.unpriced_requests, 0);
      assert.ok(row.cost > 0);
      assert.ok(Math.abs(row.cost - expected.get(key.id)!) < 1e-9, `${key.id}: ${row.cost} vs ${expected.get(key.id)}`);
    }
    // Before the price was set, cortex-chat's requests were counted in tokens only.
    const earlier = (await usage('group_by=model&to=' + from)).find((r) => r.model === 'cortex-chat');
    assert.ok(earlier && earlier.unpriced_requests === earlier.requests && earlier.cost === 0);
    // The metrics count the same money, from the same records.
    await waitFor(async () => {
      const metrics = await scrape(stack);
      return keys.every((key) => {
        const total = [...metrics]
          .filter(([name]) => name.startsWith('cortex_spend_cost_total{') && name.includes(`key="${key.id}"`))
          .reduce((sum, [, value]) => sum + value, 0);
        return Math.abs(total - expected.get(key.id)!) < 1e-9;
      });
    }, 10_000);
  });
});
