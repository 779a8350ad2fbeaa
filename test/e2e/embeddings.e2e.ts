import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { getLlama, LlamaLogLevel } from 'node-llama-cpp';
import { encodeFixtureModel } from '@cortex/fixtures';
import { postJson, startStack, waitFor, type TestStack } from '@cortex/testing';

const cosine = (a: readonly number[], b: readonly number[]): number =>
  a.reduce((sum, x, i) => sum + x * (b[i] ?? 0), 0);
const norm = (v: readonly number[]): number => Math.sqrt(cosine(v, v));

interface ApiError {
  error: { message: string; type: string; param?: string | null };
}
interface Rerank {
  object: string;
  model: string;
  results: Array<{ index: number; relevance_score: number; document?: { text: string } }>;
  usage: { prompt_tokens: number; total_tokens: number };
}
interface ModelEntry {
  id: string;
  loaded: boolean;
  capabilities: Record<string, boolean>;
}

const TEXT = 'the cat sat on the mat';
const NEAR = 'the cat sat on a mat';
const FAR = 'quarterly revenue grew in the third year';

/** The token ids the embedding fixture gives a text, from its own tokenizer. */
async function tokensOf(text: string): Promise<number[]> {
  const dir = mkdtempSync(join(tmpdir(), 'cortex-embed-vocab-'));
  const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
  try {
    const path = join(dir, 'cortex-embed.gguf');
    writeFileSync(path, encodeFixtureModel('cortex-embed'));
    const model = await llama.loadModel({ modelPath: path, vocabOnly: true });
    return [...model.tokenize(text)];
  } finally {
    await llama.dispose();
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('embeddings and rerank e2e', () => {
  let stack: TestStack;
  let client: OpenAI;

  before(async () => {
    stack = await startStack({
      models: [
        { id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: 512, pinned: true, slots: 1 },
        {
          id: 'cortex-embed',
          file: 'fixture:cortex-embed',
          kind: 'embedding',
          matryoshka: true,
          context_size: 128,
          slots: 2,
          aliases: ['embed-alias'],
        },
        { id: 'cortex-embed-fixed', file: 'fixture:cortex-embed', kind: 'embedding', context_size: 128, slots: 1 },
        { id: 'cortex-rank', file: 'fixture:cortex-rank', kind: 'ranking', context_size: 256, slots: 1 },
      ],
    });
    client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
  });

  after(async () => {
    await stack?.stop();
  });

  const models = async (): Promise<ModelEntry[]> =>
    ((await (await fetch(`${stack.baseUrl}/v1/models`)).json()) as { data: ModelEntry[] }).data;
  const post = async <T>(path: string, body: unknown): Promise<{ status: number; body: T }> => {
    const response = await postJson(`${stack.baseUrl}${path}`, body);
    return { status: response.status, body: (await response.json()) as T };
  };
  const expect400 = async (path: string, body: unknown, param: string, message?: RegExp): Promise<void> => {
    const { status, body: error } = await post<ApiError>(path, body);
    assert.equal(status, 400, JSON.stringify(error));
    assert.equal(error.error.type, 'invalid_request_error');
    assert.equal(error.error.param, param, error.error.message);
    if (message) assert.match(error.error.message, message);
  };

  it("embeddings e2e - /v1/models shows each model's capability before it is loaded", async () => {
    const byId = new Map((await models()).map((m) => [m.id, m]));
    assert.deepEqual(byId.get('cortex-chat')?.capabilities, {
      chat: true,
      embeddings: false,
      rerank: false,
      tools: true,
      reasoning: true,
      format: 'hermes',
      vision: false,
      completions: true,
      fim: false,
    });
    assert.deepEqual(byId.get('cortex-embed')?.capabilities, { chat: false, embeddings: true, rerank: false });
    assert.deepEqual(byId.get('cortex-rank')?.capabilities, { chat: false, embeddings: false, rerank: true });
    assert.equal(byId.get('cortex-embed')?.loaded, false, 'not pinned: loaded by the first request');
  });

  it('embeddings e2e - the official client embeds a batch, loading the model on demand; cosine orders the pairs', async () => {
    const response = await client.embeddings.create({
      model: 'cortex-embed',
      input: [TEXT, NEAR, FAR],
      encoding_format: 'float',
    });
    assert.equal(response.object, 'list');
    assert.equal(response.model, 'cortex-embed');
    assert.deepEqual(
      response.data.map((d) => [d.object, d.index]),
      [
        ['embedding', 0],
        ['embedding', 1],
        ['embedding', 2],
      ],
    );
    const [text = [], near = [], far = []] = response.data.map((d) => d.embedding);
    assert.equal(text.length, 64);
    for (const v of [text, near, far]) assert.ok(Math.abs(norm(v) - 1) < 1e-5, `unit length, got ${norm(v)}`);
    assert.ok(cosine(text, near) > cosine(text, far) + 0.4, `near ${cosine(text, near)} vs far ${cosine(text, far)}`);
    assert.ok(response.usage.prompt_tokens >= 3 * 3, `prompt tokens ${response.usage.prompt_tokens}`);
    assert.equal(response.usage.total_tokens, response.usage.prompt_tokens);
    const entry = (await models()).find((m) => m.id === 'cortex-embed');
    assert.equal(entry?.loaded, true);
    assert.deepEqual(entry?.capabilities, {
      chat: false,
      embeddings: true,
      rerank: false,
      tools: false,
      reasoning: false,
      vision: false,
    });
  });

  it("embeddings e2e - base64 carries the same float32 values; the client's default (base64, decoded) agrees", async () => {
    const float = await client.embeddings.create({ model: 'cortex-embed', input: TEXT, encoding_format: 'float' });
    const base64 = await client.embeddings.create({ model: 'embed-alias', input: TEXT, encoding_format: 'base64' });
    const encoded = base64.data[0]?.embedding as unknown as string;
    assert.equal(typeof encoded, 'string');
    const bytes = Buffer.from(encoded, 'base64');
    const decoded = Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4));
    assert.deepEqual(
      decoded,
      float.data[0]?.embedding.map((x) => Math.fround(x)),
    );
    const byDefault = await client.embeddings.create({ model: 'cortex-embed', input: TEXT });
    assert.deepEqual(byDefault.data[0]?.embedding, decoded);
  });

  it('embeddings e2e - token arrays embed like the text they tokenize', async () => {
    const ids = await tokensOf(TEXT);
    const [text, single, batch] = await Promise.all([
      client.embeddings.create({ model: 'cortex-embed', input: TEXT, encoding_format: 'float' }),
      client.embeddings.create({ model: 'cortex-embed', input: ids, encoding_format: 'float' }),
      client.embeddings.create({ model: 'cortex-embed', input: [ids, ids.slice(0, 2)], encoding_format: 'float' }),
    ]);
    const expected = text.data[0]?.embedding ?? [];
    assert.ok(cosine(single.data[0]?.embedding ?? [], expected) > 0.9999);
    assert.ok(cosine(batch.data[0]?.embedding ?? [], expected) > 0.9999);
    assert.equal(batch.data.length, 2);
    assert.equal(single.usage.prompt_tokens, text.usage.prompt_tokens);
  });

  it('embeddings e2e - a batch of the most inputs allowed comes back in order, one vector each (a reply over NATS max_payload)', async () => {
    const inputs = Array.from({ length: 2048 }, (_, i) => (i % 2 === 0 ? TEXT : FAR));
    const response = await client.embeddings.create({ model: 'cortex-embed', input: inputs, encoding_format: 'float' });
    assert.deepEqual(
      response.data.map((d) => d.index),
      inputs.map((_, i) => i),
    );
    const [first = [], second = []] = response.data.map((d) => d.embedding);
    response.data.forEach((d, i) =>
      assert.ok(cosine(d.embedding, i % 2 === 0 ? first : second) > 0.9999, `input ${i}`),
    );
  });

  it('embeddings e2e - an unloaded embedding model is loaded again by the next request', async () => {
    const unloaded = await postJson(`${stack.baseUrl}/admin/unload`, { model: 'cortex-embed' });
    assert.equal(unloaded.status, 200, await unloaded.text());
    await waitFor(async () => (await models()).find((m) => m.id === 'cortex-embed')?.loaded === false, 10_000);
    const response = await client.embeddings.create({ model: 'cortex-embed', input: TEXT, encoding_format: 'float' });
    assert.equal(response.data[0]?.embedding.length, 64);
    assert.equal((await models()).find((m) => m.id === 'cortex-embed')?.loaded, true);
  });

  it('embeddings e2e - dimensions cuts and renormalizes on a matryoshka model, and is a 400 elsewhere', async () => {
    const response = await client.embeddings.create({
      model: 'cortex-embed',
      input: [TEXT, NEAR, FAR],
      dimensions: 16,
      encoding_format: 'float',
    });
    const [text = [], near = [], far = []] = response.data.map((d) => d.embedding);
    assert.equal(text.length, 16);
    assert.ok(Math.abs(norm(text) - 1) < 1e-5);
    assert.ok(cosine(text, near) > cosine(text, far));
    await expect400(
      '/v1/embeddings',
      { model: 'cortex-embed-fixed', input: TEXT, dimensions: 16 },
      'dimensions',
      /cortex-embed-fixed/,
    );
    await expect400(
      '/v1/embeddings',
      { model: 'cortex-embed', input: TEXT, dimensions: 65 },
      'dimensions',
      /at most 64/,
    );
    await expect400('/v1/embeddings', { model: 'cortex-embed', input: TEXT, dimensions: 0 }, 'dimensions');
  });

  it('embeddings e2e - bad input is a 400 naming the field', async () => {
    const path = '/v1/embeddings';
    await expect400(path, { model: 'cortex-embed', input: '' }, 'input');
    await expect400(path, { model: 'cortex-embed', input: [] }, 'input');
    await expect400(path, { model: 'cortex-embed', input: [TEXT, ''] }, 'input[1]');
    await expect400(path, { model: 'cortex-embed' }, 'input');
    await expect400(path, { model: 'cortex-embed', input: Array.from({ length: 2049 }, () => TEXT) }, 'input', /2048/);
    await expect400(path, { model: 'cortex-embed', input: [TEXT, [1, 2]] }, 'input[1]');
    await expect400(path, { model: 'cortex-embed', input: [[1, -2]] }, 'input[0][1]');
    await expect400(path, { model: 'cortex-embed', input: { text: TEXT } }, 'input');
    await expect400(path, { model: 'cortex-embed', input: TEXT, encoding_format: 'int8' }, 'encoding_format');
    await expect400(path, { input: TEXT }, 'model');
    await expect400(path, { model: 'cortex-embed', input: [[5, 99_999_999]] }, 'input[0][1]', /vocabulary/);
    await expect400(
      path,
      { model: 'cortex-embed', input: [TEXT, `${TEXT} `.repeat(60)] },
      'input[1]',
      /context of 128/,
    );
    const missing = await post<ApiError>(path, { model: 'no-such-model', input: TEXT });
    assert.equal(missing.status, 404);
  });

  it("embeddings e2e - each kind refuses the other's requests, naming the model and what it serves", async () => {
    await expect400(
      '/v1/embeddings',
      { model: 'cortex-chat', input: TEXT },
      'model',
      /'cortex-chat' is a chat model.*\/v1\/chat\/completions/,
    );
    await expect400(
      '/v1/chat/completions',
      { model: 'cortex-embed', messages: [{ role: 'user', content: 'hi' }] },
      'model',
      /'cortex-embed' is an embedding model.*\/v1\/embeddings/,
    );
    await expect400(
      '/v1/rerank',
      { model: 'cortex-embed', query: 'cat', documents: ['cat'] },
      'model',
      /serves embeddings/,
    );
    await expect400('/v1/embeddings', { model: 'cortex-rank', input: TEXT }, 'model', /ranking model.*\/v1\/rerank/);
    const error = await client.chat.completions
      .create({ model: 'cortex-rank', messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e);
    assert.ok(error instanceof OpenAI.BadRequestError, String(error));
  });

  it("rerank e2e - documents that share the query's words rank first; top_n and return_documents", async () => {
    const documents = [
      'quarterly revenue grew by ten percent',
      { text: 'the cat sleeps on the warm mat' },
      'a dog runs in a park',
    ];
    const { status, body } = await post<Rerank>('/v1/rerank', {
      model: 'cortex-rank',
      query: 'where does the cat sleep',
      documents,
    });
    assert.equal(status, 200, JSON.stringify(body));
    assert.equal(body.model, 'cortex-rank');
    assert.deepEqual(body.results.map((r) => r.index).sort(), [0, 1, 2]);
    assert.equal(body.results[0]?.index, 1);
    const scores = body.results.map((r) => r.relevance_score);
    assert.deepEqual(
      scores,
      [...scores].sort((a, b) => b - a),
    );
    assert.ok((scores[0] ?? 0) > 0.5 && (scores[1] ?? 1) < 0.5, JSON.stringify(scores));
    assert.equal(body.results[0]?.document, undefined);
    assert.ok(body.usage.prompt_tokens > 0);

    const top = await post<Rerank>('/rerank', {
      model: 'cortex-rank',
      query: 'where does the cat sleep',
      documents,
      top_n: 1,
      return_documents: true,
    });
    assert.deepEqual(
      top.body.results.map((r) => [r.index, r.document?.text]),
      [[1, 'the cat sleeps on the warm mat']],
    );
    const alias = await post<Rerank>('/v1/reranking', {
      model: 'cortex-rank',
      query: 'where does the cat sleep',
      documents,
      top_n: 10,
    });
    assert.deepEqual(
      alias.body.results.map((r) => r.index),
      body.results.map((r) => r.index),
    );
  });

  it('rerank e2e - bad input is a 400 naming the field', async () => {
    const path = '/v1/rerank';
    await expect400(path, { model: 'cortex-rank', query: 'cat', documents: [] }, 'documents');
    await expect400(path, { model: 'cortex-rank', query: '', documents: ['cat'] }, 'query');
    await expect400(path, { model: 'cortex-rank', documents: ['cat'] }, 'query');
    await expect400(path, { model: 'cortex-rank', query: 'cat', documents: ['cat', 7] }, 'documents[1]');
    await expect400(path, { model: 'cortex-rank', query: 'cat', documents: [{ text: 7 }] }, 'documents[0].text');
    await expect400(path, { model: 'cortex-rank', query: 'cat', documents: ['cat'], top_n: 0 }, 'top_n');
    await expect400(
      path,
      { model: 'cortex-rank', query: 'cat', documents: [`${'cat '.repeat(300)}`] },
      'documents[0]',
      /context of 256/,
    );
  });

  it('embeddings e2e - a client that goes away cancels its batch, counted as cancelled', async () => {
    const controller = new AbortController();
    const inputs = Array.from({ length: 2048 }, (_, i) => `${FAR} ${i}`);
    const request = fetch(`${stack.baseUrl}/v1/embeddings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'cortex-embed', input: inputs }),
      signal: controller.signal,
    });
    setTimeout(() => controller.abort(), 200);
    await assert.rejects(request, { name: 'AbortError' });
    const cancelled = /^cortex_requests_cancelled_total\{[^}]*api="openai\.embeddings"[^}]*\} 1$/m;
    await waitFor(async () => cancelled.test(await (await fetch(`${stack.metricsUrl}/metrics`)).text()), 20_000);
  });

  it('embeddings e2e - metrics count requests and tokens per endpoint', async () => {
    const line = (api: string, metric: string): RegExp =>
      new RegExp(`^${metric}\\{[^}]*api="${api.replace('.', '\\.')}"[^}]*\\} [1-9]`, 'm');
    await waitFor(async () => {
      const text = await (await fetch(`${stack.metricsUrl}/metrics`)).text();
      return ['openai.embeddings', 'rerank'].every((api) =>
        ['cortex_requests_total', 'cortex_prompt_tokens_total', 'cortex_request_duration_seconds_count'].every((m) =>
          line(api, m).test(text),
        ),
      );
    }, 20_000);
    const text = await (await fetch(`${stack.metricsUrl}/metrics`)).text();
    assert.match(
      text,
      /^cortex_request_errors_total\{[^}]*api="openai\.embeddings"[^}]*code="invalid_request"[^}]*\} [1-9]/m,
    );
  });
});

describe('embeddings e2e - endpoint switches', () => {
  let stack: TestStack;

  before(async () => {
    stack = await startStack({
      models: [],
      services: ['router', 'gateway'],
      config: { gateway: { endpoints: { embeddings: false, rerank: false } } },
    });
  });

  after(async () => {
    await stack?.stop();
  });

  it('embeddings e2e - gateway.endpoints turns /v1/embeddings and the rerank routes off', async () => {
    for (const [path, setting] of [
      ['/v1/embeddings', 'embeddings'],
      ['/embeddings', 'embeddings'],
      ['/v1/rerank', 'rerank'],
      ['/rerank', 'rerank'],
      ['/v1/reranking', 'rerank'],
    ] as const) {
      const response = await postJson(`${stack.baseUrl}${path}`, { model: 'x', input: 'y' });
      assert.equal(response.status, 404, path);
      assert.match(((await response.json()) as ApiError).error.message, new RegExp(`gateway\\.endpoints\\.${setting}`));
    }
  });
});
