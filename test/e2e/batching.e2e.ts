import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { everyWorker, Subjects, type LoadResult } from '@cortex/contracts';
import { fixtureEntry as fixture, postJson, startStack, waitFor, watchBus, type TestStack } from '@cortex/testing';

const user = [{ role: 'user' as const, content: 'Hi.' }];

describe('fleet e2e - batching by model on a worker that holds one model at a time', () => {
  let stack: TestStack;
  let client: OpenAI;

  before(async () => {
    stack = await startStack({
      // cortex-loop at context 4096 needs ~5 MiB, cortex-chat ~1.06 MiB: the budget holds one or the other.
      models: [fixture('cortex-loop', { context_size: 4096 }), fixture('cortex-chat')],
      config: {
        eviction: { strategy: 'lru', swap_hold_ms: 300 },
        router: { max_waiting_per_model: 3 },
        worker: { id: 'w1', memory_budget: Math.round(5.5 * 2 ** 20), heartbeat_ms: 100 },
        log_level: 'info',
      },
    });
    client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
  });

  after(async () => {
    await stack?.stop();
  });

  it('fleet - interleaved requests for two models queue and run model by model: one swap, none fails', async () => {
    const loads = await watchBus<LoadResult>(stack.nc, everyWorker(Subjects.modelLoaded));
    const finished = await watchBus<{ model: string; status: number }>(stack.nc, Subjects.requestFinished);
    const models = ['cortex-loop', 'cortex-chat', 'cortex-loop', 'cortex-chat', 'cortex-loop', 'cortex-chat'];
    const results = await Promise.all(
      models.map(async (model, n) => {
        // Staggered so the first model is loading when the second is asked for.
        await new Promise((done) => setTimeout(done, n * 20));
        return client.chat.completions.create({
          model,
          messages: user,
          max_tokens: model === 'cortex-loop' ? 2_000 : undefined,
        });
      }),
    );
    assert.deepEqual(
      results.map((r) => r.choices[0]?.finish_reason),
      ['length', 'stop', 'length', 'stop', 'length', 'stop'],
    );
    await waitFor(() => finished.messages.length === 6, 3_000);
    await loads.stop();
    await finished.stop();
    // Which model the worker gets first depends on which estimate answers first; either way each
    // model is loaded once, and its whole batch finishes before the other model's.
    const loaded = loads.messages.map((l) => l.model);
    assert.equal(loaded.length, 2, `one load per model: ${loaded.join(', ')}`);
    assert.deepEqual([...loaded].sort(), ['cortex-chat', 'cortex-loop']);
    assert.deepEqual(
      finished.messages.map((f) => f.model),
      [loaded[0], loaded[0], loaded[0], loaded[1], loaded[1], loaded[1]],
      'the loaded model finished its batch before the swap',
    );
  });

  it('fleet - past router.max_waiting_per_model, requests waiting for a load get 429 with Retry-After', async () => {
    const controller = new AbortController();
    const long = await client.chat.completions.create(
      { model: 'cortex-loop', messages: user, stream: true, max_tokens: 30_000 },
      { signal: controller.signal },
    );
    const reading = (async () => {
      for await (const _chunk of long);
    })().catch(() => undefined);
    const ask = (): Promise<Response> =>
      postJson(`${stack.baseUrl}/v1/chat/completions`, { model: 'cortex-chat', messages: user });
    // The loop model is busy, so cortex-chat waits for it to drain; only three may wait.
    const waiting = [ask(), ask(), ask()];
    await waitFor(() => stack.logs().includes('take new requests for 300 ms more'), 5_000);
    await new Promise((done) => setTimeout(done, 500));
    const refused = await Promise.all([ask(), ask()]);
    for (const response of refused) {
      assert.equal(response.status, 429);
      assert.ok(Number(response.headers.get('retry-after')) > 0);
      const body = (await response.json()) as { error: { message: string } };
      assert.match(body.error.message, /3 requests already wait for cortex-chat to load/);
    }
    controller.abort();
    await reading;
    const served = await Promise.all(waiting);
    assert.deepEqual(
      served.map((r) => r.status),
      [200, 200, 200],
    );
  });
});
