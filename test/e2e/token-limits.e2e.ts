import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { startStack, waitFor, type TestStack } from '@cortex/testing';

const ADMIN = 'sk-admin-tpm';
const user = [{ role: 'user' as const, content: 'Hi.' }];
/** The body of a long stream on the looping model; the gateway reserves its bytes plus max_tokens. */
const LONG = JSON.stringify({ model: 'cortex-loop', messages: user, stream: true, max_tokens: 4000 });
const RESERVED = Buffer.byteLength(LONG) + 4000;

describe('tokens per minute e2e (two gateways)', () => {
  let stack: TestStack;
  let gateways: string[];
  const open: AbortController[] = [];

  before(async () => {
    stack = await startStack({
      models: [
        { id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: 512, pinned: true, slots: 4 },
        { id: 'cortex-loop', file: 'fixture:cortex-loop', context_size: 4096, pinned: true, slots: 4 },
      ],
      config: { auth: { api_keys: ['sk-static-tpm'], admin_keys: [ADMIN] }, gateway: { stall_timeout_ms: 30_000 } },
    });
    gateways = [stack.baseUrl, await stack.spawnGateway()];
  });

  after(async () => {
    for (const abort of open) abort.abort();
    await stack?.stop();
  });

  const createKey = async (body: Record<string, unknown>): Promise<{ id: string; secret: string }> => {
    const response = await fetch(`${gateways[0]}/admin/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    assert.equal(response.status, 200);
    return (await response.json()) as { id: string; secret: string };
  };
  /** A long stream, open until aborted; resolves with its head. */
  const holdStream = async (base: string, key: string): Promise<Response> => {
    const abort = new AbortController();
    open.push(abort);
    const response = await fetch(`${base}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: LONG,
      signal: abort.signal,
    });
    if (response.ok) {
      const reader = response.body!.getReader();
      void (async () => {
        try {
          while (!(await reader.read()).done) await new Promise((done) => setTimeout(done, 50));
        } catch {
          // aborted
        }
      })();
    } else {
      await response.text();
    }
    return response;
  };

  it('tpm - across both gateways, requests are admitted while the minute is not full, then 429 with retry-after and the token headers; unused tokens come back', async () => {
    // 2.5 reservations a minute: the third request finds 48 s of the minute taken and is admitted,
    // the fourth finds 72 s taken (12 s over) and is refused.
    const tpm = Math.round(RESERVED * 2.5);
    const key = await createKey({ name: 'tpm', account: 'tpm-team', limits: { tokens_per_minute: tpm } });
    const heads: Response[] = [];
    for (let i = 0; i < 4; i++) heads.push(await holdStream(gateways[i % 2]!, key.secret));
    assert.deepEqual(
      heads.map((r) => r.status),
      [200, 200, 200, 429],
    );
    assert.equal(heads[0]!.headers.get('x-ratelimit-limit-tokens'), String(tpm));
    assert.equal(heads[0]!.headers.get('x-ratelimit-remaining-tokens'), String(tpm - RESERVED));
    assert.match(heads[0]!.headers.get('x-ratelimit-reset-tokens')!, /^\d+(\.\d+)?s$/);
    assert.equal(heads[2]!.headers.get('x-ratelimit-remaining-tokens'), '0');
    const refused = heads[3]!;
    const wait = Number(refused.headers.get('retry-after-ms'));
    assert.ok(wait > 10_000 && wait <= 12_100, `retry-after-ms ${wait}`);
    assert.equal(refused.headers.get('retry-after'), String(Math.ceil(wait / 1000)));
    assert.equal(refused.headers.get('x-ratelimit-remaining-tokens'), '0');

    // Ending the streams gives back what they reserved and did not use: the key is admitted again.
    for (const abort of open.splice(0)) abort.abort();
    await waitFor(
      async () => {
        const response = await fetch(`${gateways[1]}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key.secret}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'cortex-chat', messages: user, max_tokens: 8 }),
        });
        await response.text();
        return response.status === 200;
      },
      20_000,
      250,
    );
  });

  it('tpm - the refusal is rate_limit_exceeded naming the limit; /v1/messages carries anthropic-ratelimit-{tokens,input-tokens,output-tokens}-*', async () => {
    const key = await createKey({ name: 'tpm-anthropic', limits: { tokens_per_minute: 100_000 } });
    const client = new Anthropic({ baseURL: gateways[1], apiKey: key.secret, maxRetries: 0 });
    const { response } = await client.messages
      .create({ model: 'cortex-chat', max_tokens: 16, messages: user })
      .withResponse();
    for (const kind of ['tokens', 'input-tokens', 'output-tokens']) {
      assert.equal(response.headers.get(`anthropic-ratelimit-${kind}-limit`), '100000');
      assert.ok(Number(response.headers.get(`anthropic-ratelimit-${kind}-remaining`)) < 100_000);
      assert.match(
        response.headers.get(`anthropic-ratelimit-${kind}-reset`)!,
        /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/,
      );
    }
    const tiny = await createKey({ name: 'tpm-tiny', limits: { tokens_per_minute: 10 } });
    const first = await fetch(`${gateways[0]}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tiny.secret}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'cortex-chat', messages: user, max_tokens: 8 }),
    });
    assert.equal(first.status, 200, 'one request may overshoot a minute by its own reservation');
    await first.text();
    const second = await fetch(`${gateways[1]}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${tiny.secret}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'cortex-chat', messages: user, max_tokens: 8 }),
    });
    assert.equal(second.status, 429);
    const error = ((await second.json()) as { error: { code: string; message: string } }).error;
    assert.equal(error.code, 'rate_limit_exceeded');
    assert.match(error.message, /tokens per minute/);
    assert.match(error.message, new RegExp(tiny.id));
  });
});
