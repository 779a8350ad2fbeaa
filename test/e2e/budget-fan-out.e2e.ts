import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { postJson, startStack, waitFor, type TestStack } from '@cortex/testing';

const ADMIN = 'sk-admin-fan-out';
/** cortex-chat's price per million tokens, in the default billing.currency (USD). */
const PRICE = { input: 2, output: 10 };
const CAP = 5;

/** A chat completion with 16 choices: each evaluates the whole prompt. */
const CHAT = { model: 'cortex-chat', messages: [{ role: 'user', content: 'Hi.' }], max_tokens: CAP, n: 16 };
/** A legacy completion with 16 prompts: each runs its own prompt. */
const PROMPTS = Array.from({ length: 16 }, (_, i) => `Tell me about the number ${i}.`);
const LEGACY = { model: 'cortex-chat', prompt: PROMPTS, max_tokens: CAP };

const bytes = (value: unknown): number => Buffer.byteLength(JSON.stringify(value));
/** What each request reserves (docs/keys.md): every run's prompt bound and output cap. */
const BOUNDS = {
  chat: { prompt: 16 * bytes(CHAT), output: 16 * CAP },
  legacy: {
    // Each prompt with the body less the other prompts.
    prompt: PROMPTS.reduce((sum, p) => sum + bytes(LEGACY) - PROMPTS.reduce((s, q) => s + bytes(q), 0) + bytes(p), 0),
    output: 16 * CAP,
  },
};
const tokensOf = (b: { prompt: number; output: number }): number => b.prompt + b.output;
const moneyOf = (b: { prompt: number; output: number }): number =>
  (b.prompt * PRICE.input + b.output * PRICE.output) / 1e6;

describe('budgets e2e: requests that fan out (two gateways, one NATS)', () => {
  let stack: TestStack;
  let gateways: string[];

  before(async () => {
    stack = await startStack({
      models: [
        { id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: 512, pinned: true, slots: 4, cost: PRICE },
      ],
      config: { auth: { admin_keys: [ADMIN] }, gateway: { stall_timeout_ms: 30_000 } },
    });
    gateways = [stack.baseUrl, await stack.spawnGateway()];
  });

  after(async () => {
    await stack?.stop();
  });

  const admin = async (method: string, path: string, body?: unknown): Promise<Record<string, unknown>> => {
    const response = await fetch(`${gateways[0]}${path}`, {
      method,
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
      ...(body !== undefined && { body: JSON.stringify(body) }),
    });
    assert.equal(response.status, 200);
    return (await response.json()) as Record<string, unknown>;
  };
  type Shown = { spent: number; reserved: number };
  /** Waits until no request of the key holds a reservation, and returns both budgets as shown. */
  const settled = async (id: string): Promise<{ tokens: Shown | null; money: Shown | null }> => {
    let usage = { token_budget: null as Shown | null, money_budget: null as Shown | null };
    await waitFor(
      async () => {
        usage = ((await admin('GET', `/admin/keys/${id}`)) as { usage: typeof usage }).usage;
        return (usage.token_budget?.reserved ?? 0) === 0 && (usage.money_budget?.reserved ?? 0) === 0;
      },
      10_000,
      50,
    );
    return { tokens: usage.token_budget, money: usage.money_budget };
  };

  interface Answer {
    status: number;
    code?: string;
    choices: number;
    tokens: number;
    cost: number;
  }
  const send = async (base: string, secret: string, which: 'chat' | 'legacy'): Promise<Answer> => {
    const path = which === 'chat' ? '/v1/chat/completions' : '/v1/completions';
    const response = await postJson(`${base}${path}`, which === 'chat' ? CHAT : LEGACY, {
      authorization: `Bearer ${secret}`,
    });
    const json = (await response.json()) as {
      choices?: unknown[];
      usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
      error?: { code: string };
    };
    const usage = json.usage;
    return {
      status: response.status,
      code: json.error?.code,
      choices: json.choices?.length ?? 0,
      tokens: usage?.total_tokens ?? 0,
      cost: usage ? (usage.prompt_tokens * PRICE.input + usage.completion_tokens * PRICE.output) / 1e6 : 0,
    };
  };

  /**
   * Spends the key's budget in waves of requests at once on both gateways, `n: 16` chats and
   * 16-prompt legacy completions mixed; after each wave one request alone, until that one is refused.
   */
  const spend = async (secret: string, id: string): Promise<Answer[]> => {
    const answered: Answer[] = [];
    for (let wave = 0; wave < 30; wave++) {
      const kinds = ['chat', 'legacy', 'legacy', 'chat'] as const;
      answered.push(...(await Promise.all(kinds.map((kind, i) => send(gateways[i % 2]!, secret, kind)))));
      await settled(id);
      answered.push(await send(gateways[wave % 2]!, secret, wave % 2 === 0 ? 'chat' : 'legacy'));
      if (answered.at(-1)!.status === 429) break;
      await settled(id);
    }
    assert.equal(answered.at(-1)!.status, 429, 'the budget ran out');
    assert.equal(answered.at(-1)!.code, 'insufficient_quota');
    const admitted = answered.filter((a) => a.status === 200);
    assert.ok(admitted.length >= 4, `${admitted.length} admitted`);
    for (const a of admitted) assert.equal(a.choices, 16, 'every admitted request answered its 16 choices');
    for (const a of answered) assert.ok(a.status === 200 || a.status === 429, `status ${a.status}`);
    return answered;
  };

  it('budgets - a request of 16 runs takes one reservation of its 16 prompts and 16 output caps, on either gateway (its tokens-per-minute window says so)', async () => {
    const cases = [
      { path: '/v1/chat/completions', body: CHAT, bound: BOUNDS.chat },
      { path: '/v1/completions', body: LEGACY, bound: BOUNDS.legacy },
      {
        path: '/v1/chat/completions',
        body: { ...CHAT, stream: true },
        bound: { ...BOUNDS.chat, prompt: 16 * bytes({ ...CHAT, stream: true }) },
      },
    ];
    for (const [i, { path, body, bound }] of cases.entries()) {
      // A key of its own: its window holds this request's reservation alone.
      const key = (await admin('POST', '/admin/keys', {
        name: `fan-out-window-${i}`,
        limits: { tokens_per_minute: 1_000_000 },
      })) as { id: string; secret: string };
      const response = await postJson(`${gateways[i % 2]}${path}`, body, { authorization: `Bearer ${key.secret}` });
      assert.equal(response.status, 200);
      await response.text();
      assert.equal(
        1_000_000 - Number(response.headers.get('x-ratelimit-remaining-tokens')),
        tokensOf(bound),
        `${path}: what it reserved`,
      );
    }
  });

  it('budgets - one request of 16 runs against a 100-token budget overshoots it by at most its own reservation (read from its tokens-per-minute window), on either gateway', async () => {
    // A long prompt, evaluated by every run: a reservation that counts it once is far below what the request spends.
    const long = 'Please answer this question about the weather in Paris, briefly and in plain words. '.repeat(3);
    const cases = [
      { path: '/v1/chat/completions', body: { ...CHAT, messages: [{ role: 'user', content: long }] } },
      { path: '/v1/completions', body: { model: 'cortex-chat', prompt: long, n: 16, max_tokens: CAP } },
      { path: '/v1/completions', body: { ...LEGACY, prompt: PROMPTS.map((p) => `${long}${p}`) } },
    ];
    for (const [i, { path, body }] of cases.entries()) {
      const key = (await admin('POST', '/admin/keys', {
        name: `fan-out-100-${i}`,
        limits: { token_budget: { tokens: 100, window: 'day' }, tokens_per_minute: 1_000_000 },
      })) as { id: string; secret: string };
      const response = await postJson(`${gateways[i % 2]}${path}`, body, { authorization: `Bearer ${key.secret}` });
      const answer = (await response.json()) as { choices: unknown[]; usage: { total_tokens: number } };
      assert.equal(response.status, 200, JSON.stringify(answer));
      assert.equal(answer.choices.length, 16);
      const reserved = 1_000_000 - Number(response.headers.get('x-ratelimit-remaining-tokens'));
      const { tokens } = await settled(key.id);
      assert.equal(tokens!.spent, answer.usage.total_tokens);
      assert.ok(
        tokens!.spent - 100 <= reserved,
        `${path}: spent ${tokens!.spent} of 100, over by ${tokens!.spent - 100}, its reservation ${reserved}`,
      );
      // Spent: the next is refused, not worth retrying.
      const refused = await postJson(`${gateways[(i + 1) % 2]}${path}`, body, {
        authorization: `Bearer ${key.secret}`,
      });
      assert.equal(refused.status, 429);
      assert.equal(((await refused.json()) as { error: { code: string } }).error.code, 'insufficient_quota');
    }
  });

  it('budgets - a token budget spent by n: 16 chats and 16-prompt completions on both gateways: overshoot at most one reservation, spend equals the usage answered', async () => {
    const budget = 8_000;
    const key = (await admin('POST', '/admin/keys', {
      name: 'fan-out-tokens',
      limits: { token_budget: { tokens: budget, window: 'day' } },
    })) as { id: string; secret: string };
    const answered = await spend(key.secret, key.id);
    const { tokens } = await settled(key.id);
    const spent = tokens!.spent;
    const used = answered.reduce((sum, a) => sum + a.tokens, 0);
    assert.equal(spent, used, 'the ledger charged exactly the usage the responses reported');
    const reservation = Math.max(tokensOf(BOUNDS.chat), tokensOf(BOUNDS.legacy));
    // A run of 16 choices spends its prompt 16 times: a reservation that counted it once let a wave through.
    assert.ok(
      spent >= budget && spent <= budget + reservation,
      `spent ${spent} of ${budget} (one reservation is at most ${reservation})`,
    );
    console.log(
      `token budget ${budget}: ${answered.filter((a) => a.status === 200).length} requests of 16 runs admitted, ` +
        `${answered.filter((a) => a.status === 429).length} refused, ${spent} tokens spent ` +
        `(reservations: chat ${tokensOf(BOUNDS.chat)}, legacy ${tokensOf(BOUNDS.legacy)})`,
    );
  });

  it("budgets - a money budget spent by n: 16 chats and 16-prompt completions on both gateways: overshoot at most one reservation, charged exactly the usage records' cost", async () => {
    const budget = 0.008;
    const key = (await admin('POST', '/admin/keys', {
      name: 'fan-out-money',
      limits: {
        money_budget: { amount: budget, window: 'month' },
        token_budget: { tokens: 10_000_000, window: 'month' },
      },
    })) as { id: string; secret: string };
    const answered = await spend(key.secret, key.id);
    const { money, tokens } = await settled(key.id);
    const spent = money!.spent;
    const cost = answered.reduce((sum, a) => sum + a.cost, 0);
    assert.ok(Math.abs(spent - cost) < 1e-9, `the ledger charged ${spent}, the answers' usage costs ${cost}`);
    assert.equal(
      tokens!.spent,
      answered.reduce((sum, a) => sum + a.tokens, 0),
    );
    const reservation = Math.max(moneyOf(BOUNDS.chat), moneyOf(BOUNDS.legacy));
    assert.ok(
      spent >= budget && spent <= budget + reservation + 1e-9,
      `spent ${spent} of ${budget} USD (one reservation is at most ${reservation})`,
    );
    console.log(
      `money budget ${budget} USD: ${answered.filter((a) => a.status === 200).length} requests of 16 runs admitted, ` +
        `${spent} USD spent (reservations: chat ${moneyOf(BOUNDS.chat)}, legacy ${moneyOf(BOUNDS.legacy)})`,
    );
  });
});
