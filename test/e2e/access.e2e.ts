import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { freePort } from '@cortex/bus';
import { fixtureModel } from '@cortex/fixtures';
import { postJson, startStack, type TestStack } from '@cortex/testing';

const CLI = resolve(fileURLToPath(new URL('../../../apps/cli/dist/main.js', import.meta.url)));
const user = [{ role: 'user' as const, content: 'Hi.' }];

describe('gateway access e2e', () => {
  let stack: TestStack;

  before(async () => {
    stack = await startStack({
      models: [
        { id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: 512, pinned: true },
        { id: 'cortex-reasoning', file: 'fixture:cortex-reasoning', context_size: 512 },
      ],
      config: {
        auth: { api_keys: ['sk-user'], admin_keys: ['sk-admin'] },
        gateway: {
          body_limit_bytes: 2048,
          endpoints: { responses: false, completions: false },
          hosted_tools: 'reject',
        },
      },
    });
  });

  after(async () => {
    await stack?.stop();
  });

  const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
    postJson(`${stack.baseUrl}${path}`, body, headers);

  it('access - a missing or wrong key is a 401 in the caller’s dialect', async () => {
    const openai = await post('/v1/chat/completions', { model: 'cortex-chat', messages: user });
    assert.equal(openai.status, 401);
    const openaiBody = (await openai.json()) as { error: { type: string; code: string; message: string } };
    assert.equal(openaiBody.error.code, 'unauthorized');
    assert.match(openaiBody.error.message, /API key is missing: send an API key as "Authorization: Bearer <key>"/);

    const anthropic = await post(
      '/v1/messages',
      { model: 'cortex-chat', max_tokens: 8, messages: user },
      { 'x-api-key': 'wrong' },
    );
    assert.equal(anthropic.status, 401);
    assert.deepEqual(
      ((await anthropic.json()) as { type: string; error: { type: string } }).error.type,
      'authentication_error',
    );

    await assert.rejects(
      new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'wrong', maxRetries: 0 }).models.list(),
      (error: unknown) => error instanceof OpenAI.AuthenticationError,
    );
  });

  it('access - Bearer and x-api-key both work, admin keys work as API keys, health needs none', async () => {
    const openai = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'sk-user', maxRetries: 0 });
    const reply = await openai.chat.completions.create({ model: 'cortex-chat', messages: user });
    assert.equal(reply.choices[0]?.message.content, fixtureModel('cortex-chat').expected.text);
    const anthropic = new Anthropic({ baseURL: stack.baseUrl, apiKey: 'sk-admin', maxRetries: 0 });
    const message = await anthropic.messages.create({ model: 'cortex-chat', max_tokens: 16, messages: user });
    assert.equal((message.content[0] as Anthropic.TextBlock).text, fixtureModel('cortex-chat').expected.text);
    assert.equal((await fetch(`${stack.baseUrl}/healthz`)).status, 200);
    assert.equal((await fetch(`${stack.baseUrl}/readyz`)).status, 200);
  });

  it('access - HEAD / and GET / answer 200 without a key; query strings do not change the route', async () => {
    // Claude Code probes HEAD / before its first request and posts to /v1/messages?beta=true.
    const head = await fetch(`${stack.baseUrl}/`, { method: 'HEAD' });
    assert.equal(head.status, 200);
    const get = await fetch(`${stack.baseUrl}/`);
    assert.equal(get.status, 200);
    assert.deepEqual(await get.json(), { status: 'ok', service: 'cortex' });
    const anthropic = await post(
      '/v1/messages?beta=true',
      { model: 'cortex-chat', max_tokens: 16, messages: user },
      { 'x-api-key': 'sk-user' },
    );
    assert.equal(anthropic.status, 200);
    assert.equal(
      ((await anthropic.json()) as { content: Array<{ text: string }> }).content[0]?.text,
      fixtureModel('cortex-chat').expected.text,
    );
    const unauthorized = await post('/v1/messages?beta=true', { model: 'cortex-chat', max_tokens: 16, messages: user });
    assert.equal(unauthorized.status, 401);
    assert.equal(((await unauthorized.json()) as { error: { type: string } }).error.type, 'authentication_error');
  });

  it('access - admin routes need an admin key', async () => {
    const asUser = await fetch(`${stack.baseUrl}/admin/fleet`, { headers: { authorization: 'Bearer sk-user' } });
    assert.equal(asUser.status, 401);
    assert.match(((await asUser.json()) as { error: { message: string } }).error.message, /admin key/);
  });

  it('access - a disabled endpoint family answers 404 saying which setting disables it', async () => {
    const response = await post(
      '/v1/responses',
      { model: 'cortex-chat', input: 'hi' },
      { authorization: 'Bearer sk-user' },
    );
    assert.equal(response.status, 404);
    assert.match(
      ((await response.json()) as { error: { message: string } }).error.message,
      /gateway\.endpoints\.responses/,
    );
  });

  it('access - gateway.endpoints.completions: false turns the legacy Completions route off, not Chat Completions', async () => {
    const response = await post(
      '/v1/completions',
      { model: 'cortex-chat', prompt: 'hi' },
      { authorization: 'Bearer sk-user' },
    );
    assert.equal(response.status, 404);
    assert.match(
      ((await response.json()) as { error: { message: string } }).error.message,
      /gateway\.endpoints\.completions/,
    );
    const chat = await post(
      '/v1/chat/completions',
      { model: 'cortex-chat', max_tokens: 4, messages: user },
      { authorization: 'Bearer sk-user' },
    );
    assert.equal(chat.status, 200);
  });

  it('access - gateway.hosted_tools: reject answers a server tool with a 400 naming it', async () => {
    const body = {
      model: 'cortex-chat',
      max_tokens: 8,
      messages: user,
      tools: [{ type: 'web_search_20250305', name: 'web_search' }],
    };
    const response = await post('/v1/messages', body, { 'x-api-key': 'sk-user' });
    assert.equal(response.status, 400);
    const error = ((await response.json()) as { error: { type: string; message: string } }).error;
    assert.equal(error.type, 'invalid_request_error');
    assert.match(error.message, /^tools\[0\]\.type: server tool "web_search_20250305" is not supported/);
  });

  it('access - a body over the limit is a 413 in the caller’s dialect', async () => {
    const big = { model: 'cortex-chat', max_tokens: 8, messages: [{ role: 'user', content: 'x'.repeat(4096) }] };
    const openai = await post('/v1/chat/completions', big, { authorization: 'Bearer sk-user' });
    assert.equal(openai.status, 413);
    assert.equal(((await openai.json()) as { error: { code: string } }).error.code, 'payload_too_large');
    const anthropic = await post('/v1/messages', big, { 'x-api-key': 'sk-user' });
    assert.equal(anthropic.status, 413);
    assert.equal(
      ((await anthropic.json()) as { type: string; error: { type: string } }).error.type,
      'request_too_large',
    );
  });

  it('access - a 64 MiB body is a 413 that fetch reads, 20 times in 20 (it writes the whole body before reading)', async () => {
    const body = JSON.stringify({
      model: 'cortex-chat',
      max_tokens: 8,
      messages: [{ role: 'user', content: 'x'.repeat(64 * 1024 * 1024) }],
    });
    const seen: string[] = [];
    for (let i = 0; i < 20; i++) {
      try {
        const response = await fetch(`${stack.baseUrl}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: 'Bearer sk-user' },
          body,
          signal: AbortSignal.timeout(30_000),
        });
        const error = ((await response.json()) as { error: { code: string } }).error;
        seen.push(`${response.status} ${error.code}`);
      } catch (thrown) {
        const cause = (thrown as Error & { cause?: { code?: string } }).cause;
        seen.push(`fetch failed: ${cause?.code ?? (thrown as Error).message}`);
      }
    }
    assert.deepEqual(
      seen,
      Array.from({ length: 20 }, () => '413 payload_too_large'),
    );
  });

  it('access - x-include-thinking inlines reasoning into content', async () => {
    const openai = new OpenAI({
      baseURL: `${stack.baseUrl}/v1`,
      apiKey: 'sk-user',
      maxRetries: 0,
      defaultHeaders: { 'x-include-thinking': 'true' },
    });
    const reasoning = fixtureModel('cortex-reasoning');
    const expected = `<think>${reasoning.expected.reasoning}</think>${reasoning.expected.text}`;
    const reply = await openai.chat.completions.create({ model: 'cortex-reasoning', messages: user });
    assert.equal(reply.choices[0]?.message.content, expected);
    const streamed = await openai.chat.completions
      .stream({ model: 'cortex-reasoning', messages: user })
      .finalChatCompletion();
    assert.equal(streamed.choices[0]?.message.content, expected);
  });

  it('access - without keys the gateway refuses to listen beyond loopback', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cortex-open-'));
    writeFileSync(
      join(dir, 'cortex.yaml'),
      JSON.stringify({ gateway: { listen: `0.0.0.0:${await freePort()}` }, nats: { url: stack.nats.url } }),
    );
    const result = spawnSync(process.execPath, [CLI, 'serve', 'gateway'], {
      env: { ...process.env, CORTEX_CONFIG: join(dir, 'cortex.yaml') },
      encoding: 'utf8',
      timeout: 30_000,
    });
    assert.equal(result.status, 1);
    assert.match(
      result.stderr,
      /no API keys are configured: set auth\.api_keys \(or CORTEX_API_KEYS\), or set "auth: none"/,
    );
  });
});
