import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request as httpRequest, type Server } from 'node:http';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { ResponsesWS } from 'openai/resources/responses/ws';
import { APICallError, generateText, RetryError } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { createAnthropic } from '@ai-sdk/anthropic';
import { freePort } from '@cortex/bus';
import { jetstreamManager } from '@nats-io/jetstream';
import { postJson, scrapeMetrics, startStack, waitFor, type TestStack } from '@cortex/testing';

const ADMIN = 'sk-admin-limits';
/** A key the config file declares with limits (auth.keys), its secret in the gateways' environment. */
const DECLARED = 'sk-declared-limits-0123456789abcdef';
const user = [{ role: 'user' as const, content: 'Hi.' }];
/** cortex-chat's price per million tokens, in the default billing.currency (USD). */
const PRICE = { input: 2, output: 10 };

describe('rate limits e2e (two gateways, one NATS)', () => {
  let stack: TestStack;
  let gateways: string[];

  before(async () => {
    stack = await startStack({
      models: [
        // Priced, for money budgets; cortex-loop has no price.
        { id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: 512, pinned: true, slots: 4, cost: PRICE },
        { id: 'cortex-loop', file: 'fixture:cortex-loop', context_size: 4096, pinned: true, slots: 4 },
      ],
      // A small background store, so a few runs fill it (the test of a full store).
      config: {
        auth: {
          api_keys: ['sk-static-limits'],
          admin_keys: [ADMIN],
          keys: [
            {
              name: 'gitops-ci',
              account: 'gitops',
              tier: 3,
              limits: { requests_per_minute: 2 },
              secret_env: 'CORTEX_LIMITS_DECLARED_KEY',
            },
          ],
        },
        gateway: { stall_timeout_ms: 30_000 },
        responses: { background_max_bytes: 1024 * 1024 },
      },
      serviceEnv: { gateway: { CORTEX_LIMITS_DECLARED_KEY: DECLARED } },
    });
    gateways = [stack.baseUrl, await stack.spawnGateway()];
  });

  after(async () => {
    await stack?.stop();
  });

  const adminPost = async (method: string, path: string, body: unknown): Promise<Record<string, unknown>> => {
    const response = await fetch(`${gateways[0]}${path}`, {
      method,
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    assert.equal(response.status, 200);
    return (await response.json()) as Record<string, unknown>;
  };
  const createKey = async (body: Record<string, unknown>): Promise<{ id: string; secret: string }> => {
    return (await adminPost('POST', '/admin/keys', body)) as { id: string; secret: string };
  };
  const chat = (base: string, key: string, extra: Record<string, unknown> = {}) =>
    postJson(
      `${base}/v1/chat/completions`,
      { model: 'cortex-chat', messages: user, ...extra },
      { authorization: `Bearer ${key}` },
    );
  /** A long stream on the looping model, open until aborted; resolves once its head has arrived. */
  const holdStream = async (base: string, key: string): Promise<{ response: Response; stop: () => void }> => {
    const abort = new AbortController();
    const response = await fetch(`${base}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'cortex-loop', messages: user, stream: true, max_tokens: 4000 }),
      signal: abort.signal,
    });
    // Read slowly in the background so the stream stays open without filling every buffer.
    const reader = response.body!.getReader();
    void (async () => {
      try {
        while (!(await reader.read()).done) await new Promise((done) => setTimeout(done, 50));
      } catch {
        // aborted
      }
    })();
    return { response, stop: () => abort.abort() };
  };

  const budgetUsage = async (id: string): Promise<{ spent: number; reserved: number }> => {
    const shown = (await (
      await fetch(`${gateways[0]}/admin/keys/${id}`, { headers: { authorization: `Bearer ${ADMIN}` } })
    ).json()) as { usage: { token_budget: { spent: number; reserved: number } } };
    return shown.usage.token_budget;
  };
  /** Waits until no request of the key holds a reservation, and returns what it has spent. */
  const settled = async (id: string): Promise<number> => {
    let spent = -1;
    await waitFor(
      async () => {
        const usage = await budgetUsage(id);
        spent = usage.spent;
        return usage.reserved === 0;
      },
      5_000,
      50,
    );
    return spent;
  };

  it('limits - requests per minute across both gateways: exactly the limit passes, then 429 with retry-after and the headers', async () => {
    const key = await createKey({ name: 'rpm-3', limits: { requests_per_minute: 3 } });
    const statuses: number[] = [];
    const responses: Response[] = [];
    for (let i = 0; i < 6; i++) {
      const response = await chat(gateways[i % 2]!, key.secret);
      statuses.push(response.status);
      responses.push(response);
    }
    assert.deepEqual(statuses, [200, 200, 200, 429, 429, 429]);
    assert.deepEqual(
      responses
        .slice(0, 3)
        .map((r) => [r.headers.get('x-ratelimit-limit-requests'), r.headers.get('x-ratelimit-remaining-requests')]),
      [
        ['3', '2'],
        ['3', '1'],
        ['3', '0'],
      ],
    );
    assert.match(responses[0]!.headers.get('x-ratelimit-reset-requests')!, /^(19\.\d+|20)s$/);
    assert.match(responses[2]!.headers.get('x-ratelimit-reset-requests')!, /^(5\d(\.\d+)?s|1m0s)$/);
    const refused = responses[3]!;
    const retryAfterMs = Number(refused.headers.get('retry-after-ms'));
    // The first request's place frees 20 s after it was admitted, a moment before this refusal.
    assert.ok(retryAfterMs > 10_000 && retryAfterMs <= 20_000, `retry-after-ms ${retryAfterMs}`);
    assert.equal(refused.headers.get('retry-after'), String(Math.ceil(retryAfterMs / 1000)));
    const body = (await refused.json()) as { error: { code: string; type: string; message: string } };
    assert.deepEqual([body.error.code, body.error.type], ['rate_limit_exceeded', 'rate_limit_error']);
    assert.match(
      body.error.message,
      new RegExp(
        `rate limit reached \\(requests per minute\\): the key ${key.id} \\("rpm-3"\\) has used its 3 requests per minute; retry in \\d+ s`,
      ),
    );

    // Anthropic's dialect and headers on /v1/messages.
    const other = await createKey({ name: 'rpm-1', limits: { requests_per_minute: 1 } });
    const anthropic = new Anthropic({ baseURL: gateways[1]!, apiKey: other.secret, maxRetries: 0 });
    const { response } = await anthropic.messages
      .create({ model: 'cortex-chat', max_tokens: 8, messages: user })
      .withResponse();
    assert.equal(response.headers.get('anthropic-ratelimit-requests-limit'), '1');
    assert.equal(response.headers.get('anthropic-ratelimit-requests-remaining'), '0');
    assert.match(response.headers.get('anthropic-ratelimit-requests-reset')!, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/);
    assert.ok(Date.parse(response.headers.get('anthropic-ratelimit-requests-reset')!) > Date.now() + 50_000);
    await assert.rejects(
      anthropic.messages.create({ model: 'cortex-chat', max_tokens: 8, messages: user }),
      (error: unknown) => error instanceof Anthropic.RateLimitError && /requests per minute/.test(error.message),
    );
  });

  it('limits - a key the config file declares with requests_per_minute is limited like a stored one, across both gateways', async () => {
    const statuses: number[] = [];
    let refused: Response | null = null;
    for (let i = 0; i < 4; i++) {
      const response = await chat(gateways[i % 2]!, DECLARED);
      statuses.push(response.status);
      if (response.status === 429) refused ??= response;
    }
    assert.deepEqual(statuses, [200, 200, 429, 429]);
    const body = (await refused!.json()) as { error: { message: string } };
    assert.match(body.error.message, /requests per minute/);
    assert.match(body.error.message, /gitops-ci/, 'the refusal names the declared key');
    assert.equal(refused!.headers.get('x-ratelimit-limit-requests'), '2');
    // A wrong secret is no key at all: with keys configured, a 401.
    assert.equal((await chat(gateways[0]!, 'sk-declared-limits-wrong-secret-000')).status, 401);
  });

  it('limits - a stream carries the headers before its first byte', async () => {
    const key = await createKey({ name: 'rpm-stream', limits: { requests_per_minute: 10 } });
    const response = await chat(gateways[0]!, key.secret, { stream: true });
    assert.equal(response.status, 200);
    assert.match(response.headers.get('content-type')!, /^text\/event-stream/);
    assert.equal(response.headers.get('x-ratelimit-limit-requests'), '10');
    assert.equal(response.headers.get('x-ratelimit-remaining-requests'), '9');
    assert.match(await response.text(), /data: \[DONE\]/);
  });

  it('limits - concurrent requests across both gateways: the request over the limit is refused, and admitted once a stream ends', async () => {
    const key = await createKey({ name: 'two-at-once', limits: { concurrent_requests: 2 } });
    const first = await holdStream(gateways[0]!, key.secret);
    const second = await holdStream(gateways[1]!, key.secret);
    assert.deepEqual([first.response.status, second.response.status], [200, 200]);
    for (const base of gateways) {
      const refused = await chat(base, key.secret, { max_tokens: 5 });
      assert.equal(refused.status, 429);
      assert.equal(refused.headers.get('retry-after-ms'), '1000');
      const body = (await refused.json()) as { error: { code: string; message: string } };
      assert.equal(body.error.code, 'rate_limit_exceeded');
      assert.match(
        body.error.message,
        /has 2 requests running, its limit of 2 concurrent requests; retry when one ends/,
      );
    }
    const shown = (await (
      await fetch(`${gateways[1]}/admin/keys/${key.id}`, { headers: { authorization: `Bearer ${ADMIN}` } })
    ).json()) as { usage: Record<string, unknown> };
    assert.deepEqual(shown.usage, {
      concurrent_requests_running: 2,
      requests_remaining: null,
      requests_reset_ms: null,
      token_budget: null,
      money_budget: null,
    });
    // A client that goes away gives its slot back.
    first.stop();
    await waitFor(async () => (await chat(gateways[1]!, key.secret, { max_tokens: 5 })).status === 200, 2_000, 50);
    second.stop();
  });

  it('limits - many requests at once on both gateways: exactly the limits pass (compare-and-set in KV)', async () => {
    const concurrent = await createKey({ name: 'three-at-once', limits: { concurrent_requests: 3 } });
    const streams = await Promise.all(
      Array.from({ length: 10 }, (_, i) => holdStream(gateways[i % 2]!, concurrent.secret)),
    );
    const statuses = streams.map((s) => s.response.status);
    for (const s of streams) s.stop();
    assert.deepEqual(
      [statuses.filter((x) => x === 200).length, statuses.filter((x) => x === 429).length],
      [3, 7],
      `statuses ${statuses.join(',')}`,
    );

    const rpm = await createKey({ name: 'five-a-minute', limits: { requests_per_minute: 5 } });
    const burst = await Promise.all(
      Array.from({ length: 12 }, (_, i) => chat(gateways[i % 2]!, rpm.secret, { max_tokens: 2 })),
    );
    const counts = burst.map((r) => r.status);
    assert.deepEqual(
      [counts.filter((x) => x === 200).length, counts.filter((x) => x === 429).length],
      [5, 7],
      `statuses ${counts.join(',')}`,
    );
  });

  it('limits - an account limit counts all its keys together', async () => {
    await adminPost('PUT', '/admin/accounts/shared-team', { limits: { concurrent_requests: 1 } });
    const a = await createKey({ name: 'a', account: 'shared-team', limits: { concurrent_requests: 5 } });
    const b = await createKey({ name: 'b', account: 'shared-team' });
    await waitFor(
      async () => {
        // The account's limits reach the gateways through the watch.
        const held = await holdStream(gateways[0]!, a.secret);
        const refused = await chat(gateways[1]!, b.secret, { max_tokens: 5 });
        held.stop();
        if (refused.status !== 429) return false;
        const body = (await refused.json()) as { error: { message: string } };
        assert.match(
          body.error.message,
          /the account shared-team has 1 requests running, its limit of 1 concurrent requests/,
        );
        return true;
      },
      5_000,
      200,
    );
  });

  it('limits - the openai client waits and retries a rate_limit_exceeded 429 (counted at the gateway)', async () => {
    const key = await createKey({ name: 'rpm-20', limits: { requests_per_minute: 20 } });
    for (let i = 0; i < 20; i++)
      assert.equal((await chat(gateways[i % 2]!, key.secret, { max_tokens: 2 })).status, 200);
    const { server, url, counted } = await countingProxy(gateways[0]!);
    try {
      const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: key.secret, maxRetries: 2 });
      const reply = await client.chat.completions.create({ model: 'cortex-chat', messages: user, max_tokens: 2 });
      assert.equal(reply.object, 'chat.completion');
      assert.deepEqual(
        counted.map((c) => c.status),
        [429, 200],
        'one refusal, then the retry the client made',
      );
      const [refusal, retry] = counted as [Counted, Counted];
      // The client honoured retry-after-ms: its retry arrived no earlier than the refusal said.
      assert.ok(refusal.retryAfterMs > 0);
      assert.ok(
        retry.at - refusal.at >= refusal.retryAfterMs - 50,
        `retried after ${retry.at - refusal.at} ms; retry-after-ms was ${refusal.retryAfterMs}`,
      );
    } finally {
      server.close();
    }
  });

  it('limits - a token budget under concurrent requests on both gateways: overshoot at most one reservation, spend equals the usage answered', async () => {
    const key = await createKey({ name: 'budget-2000', limits: { token_budget: { tokens: 2_000, window: 'day' } } });
    const body = { model: 'cortex-chat', messages: user, max_tokens: 20 };
    const reservation = Buffer.byteLength(JSON.stringify(body)) + 20;
    const answered: Array<{ status: number; tokens: number; code?: string; shouldRetry: string | null }> = [];
    const send = async (base: string): Promise<void> => {
      const response = await postJson(`${base}/v1/chat/completions`, body, { authorization: `Bearer ${key.secret}` });
      const json = (await response.json()) as { usage?: { total_tokens: number }; error?: { code: string } };
      answered.push({
        status: response.status,
        tokens: json.usage?.total_tokens ?? 0,
        code: json.error?.code,
        shouldRetry: response.headers.get('x-should-retry'),
      });
    };
    // Waves of 12 at once on both gateways; after each, one request alone: refused once the budget is spent.
    for (let wave = 0; wave < 40; wave++) {
      await Promise.all(Array.from({ length: 12 }, (_, i) => send(gateways[i % 2]!)));
      await settled(key.id);
      await send(gateways[wave % 2]!);
      if (answered.at(-1)!.status === 429) break;
      await settled(key.id);
    }
    const refused = answered.filter((a) => a.status === 429);
    assert.equal(answered.at(-1)!.status, 429, 'the budget ran out');
    // While running requests hold the rest, a refusal is worth retrying; once it is spent, it is not.
    for (const r of refused)
      assert.ok(
        ['rate_limit_exceeded/null', 'insufficient_quota/false'].includes(`${r.code}/${r.shouldRetry}`),
        `${r.code}/${r.shouldRetry}`,
      );
    assert.ok(
      refused.some((r) => r.code === 'rate_limit_exceeded'),
      'some were refused only because running requests held the rest',
    );
    assert.deepEqual([refused.at(-1)!.code, refused.at(-1)!.shouldRetry], ['insufficient_quota', 'false']);
    const usedByAnswers = answered.reduce((sum, a) => sum + a.tokens, 0);
    const spent = await settled(key.id);
    assert.equal(spent, usedByAnswers, 'the ledger charged exactly the usage the responses reported');
    assert.ok(
      spent >= 2_000 && spent <= 2_000 + reservation,
      `spent ${spent} of 2000 (one reservation is ${reservation})`,
    );
    console.log(
      `budget 2000: ${answered.length - refused.length} requests admitted, ${refused.length} refused (some while others held reservations), ${spent} tokens spent (one reservation: ${reservation})`,
    );
    const message = (await (await chat(gateways[1]!, key.secret, { max_tokens: 5 })).json()) as {
      error: { message: string };
    };
    assert.match(
      message.error.message,
      new RegExp(
        `the key ${key.id} \\("budget-2000"\\) has used its token budget: \\d+ of 2000 tokens spent today \\(UTC\\) \\(it resets at 20`,
      ),
    );
  });

  /** Waits until no request of the key holds a money reservation, and returns what the key has spent (in USD). */
  const moneySettled = async (id: string): Promise<{ spent: number; currency: string }> => {
    let shown = { spent: -1, reserved: -1, currency: '' };
    await waitFor(
      async () => {
        const answer = (await (
          await fetch(`${gateways[0]}/admin/keys/${id}`, { headers: { authorization: `Bearer ${ADMIN}` } })
        ).json()) as { usage: { money_budget: typeof shown } };
        shown = answer.usage.money_budget;
        return shown.reserved === 0;
      },
      5_000,
      50,
    );
    return shown;
  };

  it("limits - a money budget under concurrent requests on both gateways: refused at its end within one reservation, charged exactly its usage records' cost, the refusal names spent, limit and currency", async () => {
    // A token budget too, far from its end: both are reserved and settled for every request.
    const key = await createKey({
      name: 'money-0.002',
      limits: {
        money_budget: { amount: 0.002, window: 'month' },
        token_budget: { tokens: 1_000_000, window: 'month' },
      },
    });
    const body = { model: 'cortex-chat', messages: user, max_tokens: 20 };
    // The body's bytes bound the prompt, max_tokens the output, each at its price.
    const reservation = (Buffer.byteLength(JSON.stringify(body)) * PRICE.input + 20 * PRICE.output) / 1e6;
    const answered: Array<{ status: number; cost: number; code?: string; shouldRetry: string | null }> = [];
    const send = async (base: string): Promise<void> => {
      const response = await postJson(`${base}/v1/chat/completions`, body, { authorization: `Bearer ${key.secret}` });
      const json = (await response.json()) as {
        usage?: { prompt_tokens: number; completion_tokens: number };
        error?: { code: string };
      };
      answered.push({
        status: response.status,
        cost: json.usage
          ? (json.usage.prompt_tokens * PRICE.input + json.usage.completion_tokens * PRICE.output) / 1e6
          : 0,
        code: json.error?.code,
        shouldRetry: response.headers.get('x-should-retry'),
      });
    };
    // Waves of 12 at once on both gateways; after each, one request alone: refused once the budget is spent.
    for (let wave = 0; wave < 40; wave++) {
      await Promise.all(Array.from({ length: 12 }, (_, i) => send(gateways[i % 2]!)));
      await moneySettled(key.id);
      await send(gateways[wave % 2]!);
      if (answered.at(-1)!.status === 429) break;
      await moneySettled(key.id);
    }
    const refused = answered.filter((a) => a.status === 429);
    assert.equal(answered.at(-1)!.status, 429, 'the money budget ran out');
    for (const r of refused)
      assert.ok(
        ['rate_limit_exceeded/null', 'insufficient_quota/false'].includes(`${r.code}/${r.shouldRetry}`),
        `${r.code}/${r.shouldRetry}`,
      );
    assert.ok(
      refused.some((r) => r.code === 'rate_limit_exceeded'),
      'some were refused only because running requests held the rest',
    );
    assert.deepEqual([refused.at(-1)!.code, refused.at(-1)!.shouldRetry], ['insufficient_quota', 'false']);
    const { spent, currency } = await moneySettled(key.id);
    assert.equal(currency, 'USD');
    const byAnswers = answered.reduce((sum, a) => sum + a.cost, 0);
    assert.ok(Math.abs(spent - byAnswers) < 1e-9, `the ledger charged ${spent}, the answers' usage costs ${byAnswers}`);
    // The same money as the usage records say: one source, their cost.
    const [row] = (
      (await (
        await fetch(`${gateways[1]}/admin/usage?key=${key.id}&group_by=key`, {
          headers: { authorization: `Bearer ${ADMIN}` },
        })
      ).json()) as { data: Array<{ cost: number; unpriced_requests: number }> }
    ).data;
    assert.ok(row && row.unpriced_requests === 0, JSON.stringify(row));
    assert.ok(Math.abs(spent - row.cost) < 1e-9, `the ledger charged ${spent}, the usage records cost ${row.cost}`);
    assert.ok(
      spent >= 0.002 && spent <= 0.002 + reservation,
      `spent ${spent} of 0.002 USD (one reservation is ${reservation})`,
    );
    console.log(
      `money budget 0.002 USD: ${answered.length - refused.length} requests admitted, ${refused.length} refused, ${spent} USD spent (one reservation: ${reservation})`,
    );
    const message = (await (await chat(gateways[1]!, key.secret, { max_tokens: 5 })).json()) as {
      error: { message: string };
    };
    assert.match(
      message.error.message,
      new RegExp(
        `^the key ${key.id} \\("money-0\\.002"\\) has used its money budget: 0\\.00\\d+ of 0\\.002 USD spent this month \\(UTC\\) \\(it resets at \\d{4}-\\d{2}-01T00:00:00\\.000Z\\)$`,
      ),
    );
    // In Anthropic's dialect on /v1/messages, not retried by its SDK.
    const anthropic = new Anthropic({ baseURL: gateways[0]!, apiKey: key.secret, maxRetries: 0 });
    await assert.rejects(
      anthropic.messages.create({ model: 'cortex-chat', max_tokens: 5, messages: user }),
      (error: unknown) =>
        error instanceof Anthropic.RateLimitError &&
        /has used its money budget: .* of 0\.002 USD spent/.test(error.message),
    );
  });

  it('limits - under a money budget a model without a price is a 403 saying so; with both budgets set, the token budget refuses on its own', async () => {
    const key = await createKey({
      name: 'money-and-tokens',
      limits: { money_budget: { amount: 100, window: 'day' }, token_budget: { tokens: 1 } },
    });
    const unpriced = await postJson(
      `${gateways[0]}/v1/chat/completions`,
      { model: 'cortex-loop', messages: user, max_tokens: 5 },
      { authorization: `Bearer ${key.secret}` },
    );
    assert.equal(unpriced.status, 403);
    const denied = (await unpriced.json()) as { error: { code: string; message: string; param: string } };
    assert.deepEqual([denied.error.code, denied.error.param], ['permission_denied', 'model']);
    assert.match(denied.error.message, /has a money budget, and the model "cortex-loop" has no price in the catalogue/);
    // The first request spends more than the 1-token balance; the next is refused by it, with money left.
    assert.equal((await chat(gateways[1]!, key.secret, { max_tokens: 5 })).status, 200);
    await moneySettled(key.id);
    const refused = await chat(gateways[0]!, key.secret, { max_tokens: 5 });
    assert.equal(refused.status, 429);
    assert.match(((await refused.json()) as { error: { message: string } }).error.message, /has used its token budget/);
    const shown = (await (
      await fetch(`${gateways[0]}/admin/keys/${key.id}`, { headers: { authorization: `Bearer ${ADMIN}` } })
    ).json()) as { limits: unknown; usage: { money_budget: { spent: number; period: string; currency: string } } };
    assert.deepEqual(shown.limits, {
      money_budget: { amount: 100, window: 'day' },
      token_budget: { tokens: 1, window: 'balance' },
    });
    assert.ok(shown.usage.money_budget.spent > 0 && shown.usage.money_budget.spent < 0.001);
    assert.match(shown.usage.money_budget.period, /^\d{4}-\d{2}-\d{2}$/);
  });

  it('limits - a background response is charged its usage when its run ends, not when its reply closes', async () => {
    const key = await createKey({ name: 'budget-background', limits: { token_budget: { tokens: 100_000 } } });
    const client = new OpenAI({ baseURL: `${gateways[0]}/v1`, apiKey: key.secret, maxRetries: 0 });
    // A run that outlasts the 2 s a closed reply waits for its usage: the looping model writes 4000 tokens.
    const started = Date.now();
    const job = await client.responses.create({
      model: 'cortex-loop',
      input: 'Hi.',
      background: true,
      max_output_tokens: 4000,
    });
    let done = job;
    await waitFor(
      async () => {
        done = await client.responses.retrieve(job.id);
        return done.status === 'completed' || done.status === 'incomplete';
      },
      30_000,
      100,
    );
    console.log(`background run ended after ${Date.now() - started} ms`);
    const total = (done.usage?.input_tokens ?? 0) + (done.usage?.output_tokens ?? 0);
    assert.ok(total > 0);
    await waitFor(async () => (await budgetUsage(key.id)).spent === total, 5_000, 100);
    assert.equal((await budgetUsage(key.id)).reserved, 0);
  });

  it('limits - a client that hangs up pays for what it was given, in every dialect, streamed and not, read or not, queued before its first token; budget, usage records and spend metrics agree', async () => {
    /** Streams the looping model until the client holds `rounds` rounds (0: not even the first byte), then hangs up; returns the text it holds. */
    const hangUp = async (
      path: string,
      body: Record<string, unknown>,
      secret: string,
      rounds: number,
    ): Promise<string> => {
      const abort = new AbortController();
      const response = fetch(`${gateways[0]}${path}`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${secret}`,
          'x-api-key': secret,
          'anthropic-version': '2023-06-01',
          'content-type': 'application/json',
        },
        body: JSON.stringify(body),
        signal: abort.signal,
      });
      if (rounds === 0) {
        // Gone 150 ms in, having read nothing: what the worker wrote by then is paid for (a non-streamed request gets no byte before it ends).
        await new Promise((done) => setTimeout(done, 150));
        abort.abort();
        await response.catch(() => undefined);
        return '';
      }
      const reader = (await response).body!.getReader();
      const decoder = new TextDecoder();
      let text = '';
      while (text.split('Round').length - 1 < rounds) {
        const { done, value } = await reader.read();
        if (done) break;
        // The frames' JSON escapes nothing in these words: the rounds are countable in the raw SSE.
        text += decoder.decode(value, { stream: true });
      }
      abort.abort();
      return text;
    };
    const cases = [
      {
        name: 'chat stream',
        path: '/v1/chat/completions',
        body: { model: 'cortex-loop', messages: user, stream: true, max_tokens: 4000 },
        rounds: 20,
      },
      {
        name: 'messages stream',
        path: '/v1/messages',
        body: { model: 'cortex-loop', messages: user, stream: true, max_tokens: 4000 },
        rounds: 20,
      },
      {
        name: 'responses stream',
        path: '/v1/responses',
        body: { model: 'cortex-loop', input: 'Hi.', stream: true, max_output_tokens: 4000 },
        rounds: 20,
      },
      {
        name: 'completions stream',
        path: '/v1/completions',
        body: { model: 'cortex-loop', prompt: 'Hi.', stream: true, max_tokens: 4000 },
        rounds: 20,
      },
      {
        name: 'chat stream its client never read',
        path: '/v1/chat/completions',
        body: { model: 'cortex-loop', messages: user, stream: true, max_tokens: 4000 },
        rounds: 0,
      },
      {
        name: 'chat, not streamed',
        path: '/v1/chat/completions',
        body: { model: 'cortex-loop', messages: user, max_tokens: 4000 },
        rounds: 0,
      },
      {
        name: 'messages, not streamed',
        path: '/v1/messages',
        body: { model: 'cortex-loop', messages: user, max_tokens: 4000 },
        rounds: 0,
      },
    ];
    const keys: Array<{ id: string; name: string }> = [];
    for (const c of cases) {
      const key = await createKey({ name: `hang-up ${c.name}`, limits: { token_budget: { tokens: 1_000_000 } } });
      keys.push({ id: key.id, name: c.name });
      const text = await hangUp(c.path, c.body, key.secret, c.rounds);
      const spent = await settled(key.id);
      const [record] = (
        await (
          await fetch(`${gateways[0]}/admin/usage?key=${key.id}&group_by=key`, {
            headers: { authorization: `Bearer ${ADMIN}` },
          })
        ).json()
      ).data as Array<{ requests: number; prompt_tokens: number; completion_tokens: number; total_tokens: number }>;
      // Three tokens a round: what the client holds, give or take the round it was cut in.
      const given = 3 * (text.split('Round').length - 1);
      console.log(
        `hang-up, ${c.name}: the client held ${given} output tokens; charged ${spent} (${record?.prompt_tokens} prompt + ${record?.completion_tokens} completion)`,
      );
      assert.ok(record, `${c.name}: a usage record`);
      assert.equal(record.requests, 1, c.name);
      assert.equal(spent, record.total_tokens, `${c.name}: the budget and the usage record agree`);
      assert.ok(record.prompt_tokens > 0, `${c.name}: the prompt is paid for`);
      if (c.rounds > 0) {
        // Tokens in flight at the cut: what the worker wrote between the client's last read and the cancel.
        assert.ok(
          record.completion_tokens >= given - 3 && record.completion_tokens <= given + 600,
          `${c.name}: charged ${record.completion_tokens} completion tokens for ${given} given`,
        );
      }
      assert.equal((await budgetUsage(key.id)).reserved, 0);
    }
    // Before its first token: queued behind four streams that hold every slot of the model, then gone.
    const queued = await createKey({ name: 'hang-up while queued', limits: { token_budget: { tokens: 1_000_000 } } });
    const holders = await Promise.all(Array.from({ length: 4 }, () => holdStream(gateways[0]!, 'sk-static-limits')));
    const abort = new AbortController();
    const waiting = fetch(`${gateways[0]}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${queued.secret}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'cortex-loop', messages: user, stream: true, max_tokens: 4000 }),
      signal: abort.signal,
    }).catch((error: Error) => error);
    await new Promise((done) => setTimeout(done, 300));
    abort.abort();
    assert.ok((await waiting) instanceof Error, 'no byte of the answer came before the client left');
    // Settled while the holders still hold every slot: stopped first, they could free a slot for it
    // before its cancel reached the worker, and it would start (and pay for) its prompt.
    const charged = await settled(queued.id);
    for (const holder of holders) holder.stop();
    assert.equal(charged, 0, 'nothing was generated for it: nothing is charged');
    const rows = (
      await (
        await fetch(`${gateways[0]}/admin/usage?key=${queued.id}&group_by=key`, {
          headers: { authorization: `Bearer ${ADMIN}` },
        })
      ).json()
    ).data as unknown[];
    assert.deepEqual(rows, [], 'and no usage record says otherwise');
    // The spend metrics count the same records.
    await waitFor(
      async () => {
        const metrics = await scrapeMetrics(stack.metricsUrl);
        return keys.every(({ id }) =>
          [...metrics].some(
            ([name, value]) =>
              name.startsWith('cortex_spend_completion_tokens_total{') && name.includes(`key="${id}"`) && value >= 0,
          ),
        );
      },
      10_000,
      200,
    );
    const metrics = await scrapeMetrics(stack.metricsUrl);
    for (const { id, name } of keys) {
      const [row] = (
        await (
          await fetch(`${gateways[0]}/admin/usage?key=${id}&group_by=key`, {
            headers: { authorization: `Bearer ${ADMIN}` },
          })
        ).json()
      ).data as Array<{ prompt_tokens: number; completion_tokens: number }>;
      const series = (metric: string): number =>
        [...metrics]
          .filter(([series]) => series.startsWith(`${metric}{`) && series.includes(`key="${id}"`))
          .reduce((sum, [, value]) => sum + value, 0);
      assert.deepEqual(
        [series('cortex_spend_prompt_tokens_total'), series('cortex_spend_completion_tokens_total')],
        [row!.prompt_tokens, row!.completion_tokens],
        `${name}: the spend metrics equal the record`,
      );
    }
  });

  it("limits - a background response holds its key's concurrency slot until its run ends, not only until its reply", async () => {
    const key = await createKey({ name: 'one-at-a-time', limits: { concurrent_requests: 1 } });
    const client = new OpenAI({ baseURL: `${gateways[0]}/v1`, apiKey: key.secret, maxRetries: 0 });
    const job = await client.responses.create({
      model: 'cortex-loop',
      input: 'Hi.',
      background: true,
      max_output_tokens: 4000,
    });
    const during = await chat(gateways[1]!, key.secret, { max_tokens: 5 });
    assert.equal(during.status, 429, 'the running background response holds the one slot');
    assert.match(((await during.json()) as { error: { message: string } }).error.message, /concurrent/);
    await waitFor(
      async () => ['completed', 'incomplete'].includes((await client.responses.retrieve(job.id)).status ?? ''),
      30_000,
      100,
    );
    await waitFor(async () => (await chat(gateways[1]!, key.secret, { max_tokens: 5 })).status === 200, 5_000, 100);
  });

  it('limits - a full background store refuses new background responses naming the stream; chats of every key go on; a purge restores it', async () => {
    const filler = await createKey({ name: 'background-filler' });
    const limited = await createKey({
      name: 'limited-chat',
      limits: {
        requests_per_minute: 600,
        concurrent_requests: 4,
        tokens_per_minute: 100_000,
        token_budget: { tokens: 100_000 },
      },
    });
    const client = new OpenAI({ baseURL: `${gateways[0]}/v1`, apiKey: filler.secret, maxRetries: 0 });
    let refusal: { status: number; message: string } | null = null;
    for (let i = 0; i < 60 && !refusal; i++) {
      const response = await fetch(`${gateways[i % 2]}/v1/responses`, {
        method: 'POST',
        headers: { authorization: `Bearer ${filler.secret}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'cortex-loop', input: 'Hi.', background: true, max_output_tokens: 4000 }),
      });
      const body = (await response.json()) as { id?: string; error?: { message: string } };
      if (response.status !== 200) {
        refusal = { status: response.status, message: body.error?.message ?? '' };
        break;
      }
      await waitFor(
        async () =>
          ['completed', 'incomplete', 'failed'].includes((await client.responses.retrieve(body.id!)).status ?? ''),
        30_000,
        100,
      );
    }
    assert.ok(refusal, 'the store filled');
    console.log(`full background store: ${refusal.status} ${refusal.message}`);
    assert.equal(refusal.status, 503);
    assert.match(
      refusal.message,
      /the stream CORTEX_BACKGROUND, which keeps their events, holds \d+ MiB of 1 MiB \(responses\.background_max_bytes\)/,
    );
    // Everything that stores nothing new goes on: stored keys with and without limits, and config-file keys.
    for (const secret of [limited.secret, filler.secret, 'sk-static-limits']) {
      for (const base of gateways) {
        const response = await chat(base, secret, { max_tokens: 5 });
        assert.equal(response.status, 200, `${secret.slice(0, 12)}…: ${await response.clone().text()}`);
      }
    }
    await (await jetstreamManager(stack.nc)).streams.purge('CORTEX_BACKGROUND');
    const again = await client.responses.create({ model: 'cortex-chat', input: 'Hi.', background: true });
    await waitFor(async () => (await client.responses.retrieve(again.id)).status === 'completed', 20_000, 100);
  });

  it('limits - the openai client does not retry insufficient_quota; Anthropic SDK surfaces it', async () => {
    const key = await createKey({ name: 'budget-tiny', limits: { token_budget: { tokens: 50 } } });
    // Spend it, one request at a time, until a request with nothing else reserved is refused.
    for (let i = 0; i < 20; i++) {
      const status = (await chat(gateways[0]!, key.secret, { max_tokens: 5 })).status;
      const spent = await settled(key.id);
      if (status === 429 && spent >= 50) break;
    }
    const { server, url, counted } = await countingProxy(gateways[0]!);
    try {
      const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: key.secret, maxRetries: 2 });
      await assert.rejects(
        client.chat.completions.create({ model: 'cortex-chat', messages: user, max_tokens: 5 }),
        (error: unknown) => error instanceof OpenAI.RateLimitError && error.code === 'insufficient_quota',
      );
      assert.deepEqual(
        counted.map((c) => c.status),
        [429],
        'one request reached the gateway: no retry',
      );
    } finally {
      server.close();
    }
    const anthropic = new Anthropic({ baseURL: gateways[1]!, apiKey: key.secret, maxRetries: 2 });
    await assert.rejects(
      anthropic.messages.create({ model: 'cortex-chat', max_tokens: 5, messages: user }),
      (error: unknown) => error instanceof Anthropic.RateLimitError && /has used its token budget/.test(error.message),
    );
  });

  /** A Responses WebSocket of the openai client on one gateway; `turn` sends a create and returns its events through the one that ends it. */
  const openSocket = (
    base: string,
    key: string,
  ): { turn: (body: Record<string, unknown>) => Promise<SocketEvent[]>; closed: () => boolean; close: () => void } => {
    const ws = new ResponsesWS(new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0 }));
    const events: SocketEvent[] = [];
    let closed = false;
    ws.on('event', (event) => void events.push(event as unknown as SocketEvent));
    // Error events reach 'error' as well; they are read from `events`.
    ws.on('error', () => undefined);
    ws.on('close', () => (closed = true));
    return {
      turn: async (body) => {
        const from = events.length;
        ws.send({ type: 'response.create', ...body } as never);
        const end = (): number =>
          events.findIndex(
            (e, i) =>
              i >= from &&
              (e.type === 'response.completed' ||
                e.type === 'response.incomplete' ||
                e.type === 'response.failed' ||
                (e.type === 'error' && e.status !== undefined)),
          );
        await waitFor(() => end() !== -1 || closed, 30_000, 20);
        assert.notEqual(end(), -1, 'the turn ended with its terminal event or an error envelope');
        return events.slice(from, end() + 1);
      },
      closed: () => closed,
      close: () => ws.close({ code: 1000, reason: 'done' }),
    };
  };

  it('limits - WebSocket turns count like POSTs: with 2 requests per minute the third turn is refused with rate_limit_exceeded, and the socket stays open', async () => {
    const key = await createKey({ name: 'ws-rpm-2', limits: { requests_per_minute: 2 } });
    const socket = openSocket(gateways[0]!, key.secret);
    for (let i = 0; i < 2; i++) {
      const events = await socket.turn({ model: 'cortex-chat', input: 'Hi.', max_output_tokens: 8, store: false });
      assert.equal(events.at(-1)?.type, 'response.completed', JSON.stringify(events.at(-1)));
    }
    const refused = await socket.turn({ model: 'cortex-chat', input: 'Hi.', max_output_tokens: 8, store: false });
    assert.equal(refused.length, 1, refused.map((e) => e.type).join(', '));
    const [envelope] = refused as [SocketEvent];
    assert.deepEqual([envelope.type, envelope.status, envelope.error?.code], ['error', 429, 'rate_limit_exceeded']);
    assert.match(
      envelope.error?.message ?? '',
      new RegExp(`the key ${key.id} \\("ws-rpm-2"\\) has used its 2 requests per minute; retry in \\d+ s`),
    );
    assert.equal(socket.closed(), false, 'the refusal ends the turn, not the socket');
    // The same window on the other gateway: the turns were counted in the bucket every gateway reads.
    const overHttp = await chat(gateways[1]!, key.secret, { max_tokens: 2 });
    assert.equal(overHttp.status, 429);
    // A warm-up runs no model and is not counted: the socket still answers.
    const warm = await socket.turn({ model: 'cortex-chat', input: 'Hi.', generate: false, store: false });
    assert.equal(warm.at(-1)?.type, 'response.completed');
    socket.close();
  });

  it('limits - a budgeted key is charged for its WebSocket turns, and each turn has its usage record', async () => {
    const key = await createKey({
      name: 'ws-budget',
      account: 'ws-team',
      limits: { token_budget: { tokens: 100_000 } },
    });
    const socket = openSocket(gateways[1]!, key.secret);
    let told = 0;
    let previous: string | undefined;
    for (const input of ['Hi.', 'And again.']) {
      const events = await socket.turn({
        model: 'cortex-chat',
        input,
        max_output_tokens: 12,
        ...(previous && { previous_response_id: previous }),
      });
      const done = events.at(-1);
      assert.equal(done?.type, 'response.completed', JSON.stringify(done));
      const usage = done?.response?.usage;
      assert.ok(usage && usage.output_tokens > 0);
      told += usage.input_tokens + usage.output_tokens;
      previous = done?.response?.id;
    }
    socket.close();
    assert.equal(await settled(key.id), told, 'the budget charged what the turns reported');
    let rows: Array<{
      requests: number;
      prompt_tokens: number;
      completion_tokens: number;
      account: string;
      api: string;
    }> = [];
    await waitFor(
      async () => {
        const answer = (await (
          await fetch(`${gateways[0]}/admin/usage?key=${key.id}&group_by=account,key,api`, {
            headers: { authorization: `Bearer ${ADMIN}` },
          })
        ).json()) as { data: typeof rows };
        rows = answer.data;
        return rows[0]?.requests === 2;
      },
      10_000,
      100,
    );
    assert.equal(rows.length, 1);
    const [row] = rows as [(typeof rows)[number]];
    assert.deepEqual(
      [row.account, row.api, row.requests, row.prompt_tokens + row.completion_tokens],
      ['ws-team', 'openai.responses', 2, told],
    );
  });

  it('limits - a WebSocket turn naming a model its key may not use is a 403, and a key revoked while its socket is open is refused from the next turn', async () => {
    const key = await createKey({ name: 'ws-chat-only', models: ['cortex-chat'] });
    const socket = openSocket(gateways[0]!, key.secret);
    const denied = await socket.turn({ model: 'cortex-loop', input: 'Hi.', max_output_tokens: 8, store: false });
    assert.deepEqual(
      denied.map((e) => [e.type, e.status, e.error?.code]),
      [['error', 403, 'permission_denied']],
    );
    assert.match(denied[0]!.error?.message ?? '', /may not use the model 'cortex-loop'; it may use: cortex-chat/);
    assert.equal(
      (await socket.turn({ model: 'cortex-chat', input: 'Hi.', max_output_tokens: 8, store: false })).at(-1)?.type,
      'response.completed',
    );
    await adminPost('POST', `/admin/keys/${key.id}/revoke`, {});
    await waitFor(async () => (await chat(gateways[0]!, key.secret, { max_tokens: 2 })).status === 401, 2_000, 50);
    const revoked = await socket.turn({ model: 'cortex-chat', input: 'Hi.', max_output_tokens: 8, store: false });
    assert.deepEqual(
      revoked.map((e) => [e.type, e.status, e.error?.code]),
      [['error', 401, 'key_revoked']],
    );
    socket.close();
  });

  /** A key whose balance of 50 tokens is spent: a request with nothing else reserved is refused as insufficient_quota. */
  const spentKey = async (name: string): Promise<{ id: string; secret: string }> => {
    const key = await createKey({
      name,
      limits: { requests_per_minute: 100, tokens_per_minute: 100_000, token_budget: { tokens: 50 } },
    });
    for (let i = 0; i < 20; i++) {
      const status = (await chat(gateways[0]!, key.secret, { max_tokens: 5 })).status;
      if (status === 429 && (await settled(key.id)) >= 50) return key;
    }
    assert.fail('the balance of 50 tokens was not spent after 20 requests');
  };
  /** A key with 20 requests a minute, all used: the next is refused for 3 s (one place frees every 3 s). */
  const rpmUsedUp = async (name: string): Promise<{ id: string; secret: string }> => {
    const key = await createKey({ name, limits: { requests_per_minute: 20 } });
    for (let i = 0; i < 20; i++)
      assert.equal((await chat(gateways[i % 2]!, key.secret, { max_tokens: 2 })).status, 200);
    return key;
  };

  it('limits - the openai client parses x-ratelimit-* on a success and on both refusals', async () => {
    const key = await createKey({
      name: 'openai-headers',
      limits: { requests_per_minute: 2, tokens_per_minute: 10_000 },
    });
    const client = new OpenAI({ baseURL: `${gateways[0]}/v1`, apiKey: key.secret, maxRetries: 0 });
    const { response } = await client.chat.completions
      .create({ model: 'cortex-chat', messages: user, max_tokens: 5 })
      .withResponse();
    const headers = openAiLimits(response.headers);
    assert.deepEqual([headers.limitRequests, headers.remainingRequests, headers.limitTokens], [2, 1, 10_000]);
    assert.ok(
      headers.resetRequestsMs > 0 && headers.resetRequestsMs <= 60_000,
      `reset ${response.headers.get('x-ratelimit-reset-requests')}`,
    );
    assert.ok(headers.remainingTokens < 10_000 && headers.resetTokensMs > 0 && headers.resetTokensMs <= 60_000);
    await client.chat.completions.create({ model: 'cortex-chat', messages: user, max_tokens: 5 });
    const refusal = await client.chat.completions.create({ model: 'cortex-chat', messages: user, max_tokens: 5 }).then(
      () => assert.fail('the third request of the minute was admitted'),
      (error: unknown) => error,
    );
    assert.ok(refusal instanceof OpenAI.RateLimitError);
    assert.equal(refusal.code, 'rate_limit_exceeded');
    assert.match(refusal.message, /has used its 2 requests per minute/);
    assert.equal(openAiLimits(refusal.headers).remainingRequests, 0);
    assert.ok(Number(refusal.headers.get('retry-after-ms')) > 0);

    const spent = await spentKey('openai-spent');
    const quota = await new OpenAI({
      baseURL: `${gateways[1]}/v1`,
      apiKey: spent.secret,
      maxRetries: 0,
    }).chat.completions
      .create({ model: 'cortex-chat', messages: user, max_tokens: 5 })
      .catch((error: unknown) => error);
    assert.ok(quota instanceof OpenAI.RateLimitError && quota.code === 'insufficient_quota', String(quota));
    const spentHeaders = openAiLimits(quota.headers);
    assert.equal(spentHeaders.limitRequests, 100);
    assert.ok(spentHeaders.remainingRequests < 100 && spentHeaders.limitTokens === 100_000);
    assert.equal(quota.headers.get('x-should-retry'), 'false');
  });

  it('limits - the Anthropic SDK parses anthropic-ratelimit-* (RFC 3339 resets), surfaces both refusals, retries only rate_limit_exceeded (counted at the gateway)', async () => {
    const key = await createKey({
      name: 'anthropic-headers',
      limits: { requests_per_minute: 2, tokens_per_minute: 10_000 },
    });
    const anthropic = new Anthropic({ baseURL: gateways[1]!, apiKey: key.secret, maxRetries: 0 });
    const { response } = await anthropic.messages
      .create({ model: 'cortex-chat', max_tokens: 5, messages: user })
      .withResponse();
    const windows = (['requests', 'tokens', 'input-tokens', 'output-tokens'] as const).map((kind) => ({
      kind,
      ...anthropicWindow(response.headers, kind),
    }));
    assert.deepEqual(
      windows.map((w) => [w.kind, w.limit]),
      [
        ['requests', 2],
        ['tokens', 10_000],
        ['input-tokens', 10_000],
        ['output-tokens', 10_000],
      ],
    );
    assert.equal(windows[0]!.remaining, 1);
    for (const w of windows)
      assert.ok(
        w.resetAt > Date.now() - 1_000 && w.resetAt <= Date.now() + 61_000,
        `${w.kind} resets at ${new Date(w.resetAt).toISOString()}`,
      );
    await anthropic.messages.create({ model: 'cortex-chat', max_tokens: 5, messages: user });
    const refusal = await anthropic.messages
      .create({ model: 'cortex-chat', max_tokens: 5, messages: user })
      .catch((error: unknown) => error);
    assert.ok(refusal instanceof Anthropic.RateLimitError, String(refusal));
    assert.match(
      refusal.message,
      /rate limit reached \(requests per minute\): the key .* has used its 2 requests per minute/,
    );
    assert.equal(anthropicWindow(refusal.headers, 'requests').remaining, 0);

    // Retries, counted at the gateway: a window is waited for and retried, a spent balance is not.
    const used = await rpmUsedUp('anthropic-retry');
    const proxy = await countingProxy(gateways[0]!);
    try {
      const retrying = new Anthropic({ baseURL: proxy.url, apiKey: used.secret, maxRetries: 2 });
      const reply = await retrying.messages.create({ model: 'cortex-chat', max_tokens: 5, messages: user });
      assert.equal(reply.type, 'message');
      assert.deepEqual(
        proxy.counted.map((c) => c.status),
        [429, 200],
        'one refusal, then the retry the SDK made',
      );
      assert.ok(
        proxy.counted[1]!.at - proxy.counted[0]!.at >= proxy.counted[0]!.retryAfterMs - 50,
        'the retry waited for retry-after-ms',
      );
      const spent = await spentKey('anthropic-spent');
      proxy.counted.length = 0;
      const quota = await new Anthropic({ baseURL: proxy.url, apiKey: spent.secret, maxRetries: 2 }).messages
        .create({ model: 'cortex-chat', max_tokens: 5, messages: user })
        .catch((error: unknown) => error);
      assert.ok(quota instanceof Anthropic.RateLimitError, String(quota));
      assert.match(quota.message, /has used its token budget: \d+ of 50 tokens spent/);
      assert.deepEqual(
        proxy.counted.map((c) => c.status),
        [429],
        'x-should-retry: false — not retried',
      );
    } finally {
      proxy.server.close();
    }
  });

  it('limits - the AI SDK (openai and anthropic providers) surfaces both refusals with their headers; it retries every 429, insufficient_quota too (counted at the gateway)', async () => {
    const key = await createKey({
      name: 'ai-sdk-headers',
      limits: { requests_per_minute: 2, tokens_per_minute: 10_000 },
    });
    const openai = createOpenAI({ baseURL: `${gateways[0]}/v1`, apiKey: key.secret });
    const anthropic = createAnthropic({ baseURL: `${gateways[1]}/v1`, apiKey: key.secret });
    const first = await generateText({
      model: openai.chat('cortex-chat'),
      prompt: 'Hi.',
      maxOutputTokens: 5,
      maxRetries: 0,
    });
    const firstHeaders = openAiLimits(new Headers(first.response.headers));
    assert.deepEqual(
      [firstHeaders.limitRequests, firstHeaders.remainingRequests, firstHeaders.limitTokens],
      [2, 1, 10_000],
    );
    const second = await generateText({
      model: anthropic('cortex-chat'),
      prompt: 'Hi.',
      maxOutputTokens: 5,
      maxRetries: 0,
    });
    const secondHeaders = new Headers(second.response.headers);
    assert.deepEqual(
      [
        anthropicWindow(secondHeaders, 'requests').limit,
        anthropicWindow(secondHeaders, 'requests').remaining,
        anthropicWindow(secondHeaders, 'tokens').limit,
      ],
      [2, 0, 10_000],
    );
    for (const [model, limits] of [
      [openai.chat('cortex-chat'), (h: Headers) => openAiLimits(h).remainingRequests],
      [anthropic('cortex-chat'), (h: Headers) => anthropicWindow(h, 'requests').remaining],
    ] as const) {
      const refusal = await generateText({ model, prompt: 'Hi.', maxOutputTokens: 5, maxRetries: 0 }).catch(
        (error: unknown) => error,
      );
      assert.ok(APICallError.isInstance(refusal), String(refusal));
      assert.equal(refusal.statusCode, 429);
      assert.match(refusal.message, /has used its 2 requests per minute; retry in \d+ s/);
      assert.ok(refusal.responseHeaders);
      assert.equal(limits(new Headers(refusal.responseHeaders)), 0);
      assert.ok(Number(refusal.responseHeaders['retry-after-ms']) > 0);
    }

    const used = await rpmUsedUp('ai-sdk-retry');
    const spent = await spentKey('ai-sdk-spent');
    const proxy = await countingProxy(gateways[0]!);
    try {
      // A window: the AI SDK waits retry-after-ms (it honours it up to a minute) and its retry passes.
      const waited = await generateText({
        model: createOpenAI({ baseURL: `${proxy.url}/v1`, apiKey: used.secret }).chat('cortex-chat'),
        prompt: 'Hi.',
        maxOutputTokens: 5,
        maxRetries: 2,
      });
      assert.ok(waited.text.length > 0);
      assert.deepEqual(
        proxy.counted.map((c) => c.status),
        [429, 200],
      );
      assert.ok(
        proxy.counted[1]!.at - proxy.counted[0]!.at >= proxy.counted[0]!.retryAfterMs - 50,
        'the retry waited for retry-after-ms',
      );
      // A spent balance: the message reaches the caller, but only after the retries the AI SDK makes of
      // every 429 (it does not read x-should-retry): three requests at the gateway, each refused.
      for (const model of [
        createOpenAI({ baseURL: `${proxy.url}/v1`, apiKey: spent.secret }).chat('cortex-chat'),
        createAnthropic({ baseURL: `${proxy.url}/v1`, apiKey: spent.secret })('cortex-chat'),
      ]) {
        proxy.counted.length = 0;
        const quota = await generateText({ model, prompt: 'Hi.', maxOutputTokens: 5, maxRetries: 2 }).catch(
          (error: unknown) => error,
        );
        assert.ok(RetryError.isInstance(quota), String(quota));
        const last = quota.lastError;
        assert.ok(APICallError.isInstance(last));
        assert.equal(last.statusCode, 429);
        assert.match(last.message, /has used its token budget: \d+ of 50 tokens spent/);
        assert.equal(last.responseHeaders?.['x-should-retry'], 'false');
        assert.deepEqual(
          proxy.counted.map((c) => c.status),
          [429, 429, 429],
        );
      }
    } finally {
      proxy.server.close();
    }
  });

  it('limits - a gateway SIGKILLed mid-stream: its concurrency slot and budget reservation count until they expire, then free', async () => {
    // The stream's reservation (4000 tokens of output and its body) fills the budget too.
    const key = await createKey({
      name: 'one-at-once',
      limits: { concurrent_requests: 1, token_budget: { tokens: 4_000 } },
    });
    const doomed = [...stack.processes.entries()].find(([name]) => name.startsWith('gateway#'))?.[1];
    assert.ok(doomed, 'the second gateway process');
    const held = await holdStream(gateways[1]!, key.secret);
    assert.equal(held.response.status, 200);
    assert.equal((await chat(gateways[0]!, key.secret, { max_tokens: 2 })).status, 429);
    const killedAt = Date.now();
    doomed.kill('SIGKILL');
    held.stop();
    // LEASE_TTL_MS and RESERVATION_TTL_MS (15 s) after the last renewal at most; the wait is bounded a little above it.
    await waitFor(async () => (await chat(gateways[0]!, key.secret, { max_tokens: 2 })).status === 200, 17_000, 250);
    console.log(`slot and reservation of the SIGKILLed gateway free again after ${Date.now() - killedAt} ms`);
  });
});

/** OpenAI's reset durations as Go writes them (`1m0s`, `17.5s`, `120ms`), in ms. */
function goDurationMs(text: string | null): number {
  const match = /^(?:(\d+)h)?(?:(\d+)m(?!s))?(?:([\d.]+)s)?(?:(\d+)ms)?$/.exec(text ?? '');
  assert.ok(match && text, `not a Go duration: ${text}`);
  const [, h = '0', m = '0', sec = '0', ms = '0'] = match;
  return ((Number(h) * 60 + Number(m)) * 60 + Number(sec)) * 1_000 + Number(ms);
}

/** The `x-ratelimit-*` headers as a client reads them: numbers and durations. */
function openAiLimits(headers: Headers): {
  limitRequests: number;
  remainingRequests: number;
  resetRequestsMs: number;
  limitTokens: number;
  remainingTokens: number;
  resetTokensMs: number;
} {
  const number = (name: string): number => {
    const value = headers.get(name);
    assert.match(value ?? '', /^\d+$/, `${name}: ${value}`);
    return Number(value);
  };
  const tokens = headers.get('x-ratelimit-limit-tokens') !== null;
  return {
    limitRequests: number('x-ratelimit-limit-requests'),
    remainingRequests: number('x-ratelimit-remaining-requests'),
    resetRequestsMs: goDurationMs(headers.get('x-ratelimit-reset-requests')),
    limitTokens: tokens ? number('x-ratelimit-limit-tokens') : NaN,
    remainingTokens: tokens ? number('x-ratelimit-remaining-tokens') : NaN,
    resetTokensMs: tokens ? goDurationMs(headers.get('x-ratelimit-reset-tokens')) : NaN,
  };
}

/** One `anthropic-ratelimit-<kind>-*` window as a client reads it: numbers and an RFC 3339 time. */
function anthropicWindow(
  headers: Headers,
  kind: 'requests' | 'tokens' | 'input-tokens' | 'output-tokens',
): { limit: number; remaining: number; resetAt: number } {
  const reset = headers.get(`anthropic-ratelimit-${kind}-reset`) ?? '';
  assert.match(reset, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/, `anthropic-ratelimit-${kind}-reset: ${reset}`);
  const number = (name: string): number => {
    const value = headers.get(`anthropic-ratelimit-${kind}-${name}`);
    assert.match(value ?? '', /^\d+$/, `anthropic-ratelimit-${kind}-${name}: ${value}`);
    return Number(value);
  };
  return { limit: number('limit'), remaining: number('remaining'), resetAt: Date.parse(reset) };
}

interface SocketEvent {
  type: string;
  status?: number;
  error?: { code: string; message: string };
  response?: { id: string; usage?: { input_tokens: number; output_tokens: number } };
}

interface Counted {
  status: number;
  at: number;
  retryAfterMs: number;
}

/** A plain HTTP proxy in front of a gateway that records every request it passes: status, arrival, retry-after-ms. */
async function countingProxy(target: string): Promise<{ server: Server; url: string; counted: Counted[] }> {
  const counted: Counted[] = [];
  const to = new URL(target);
  const server = createServer((req, res) => {
    const at = Date.now();
    const upstream = httpRequest(
      { host: to.hostname, port: to.port, path: req.url, method: req.method, headers: req.headers },
      (answer) => {
        counted.push({
          status: answer.statusCode ?? 0,
          at,
          retryAfterMs: Number(answer.headers['retry-after-ms'] ?? 0),
        });
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    req.pipe(upstream);
  });
  const port = await freePort();
  await new Promise<void>((done) => server.listen(port, '127.0.0.1', done));
  return { server, url: `http://127.0.0.1:${port}`, counted };
}
