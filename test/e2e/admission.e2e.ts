import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { fixtureModel } from '@cortex/fixtures';
import { postJson, startStack, waitFor, type TestStack } from '@cortex/testing';

const loop = fixtureModel('cortex-loop');
const user = [{ role: 'user' as const, content: 'Go.' }];

/** One slot and a queue of one: the third concurrent request is turned away. */
describe('worker admission e2e', () => {
  let stack: TestStack;
  let client: OpenAI;

  before(async () => {
    stack = await startStack({
      models: [{ id: 'cortex-loop', file: 'fixture:cortex-loop', context_size: 4096, slots: 1, pinned: true }],
      config: { worker: { threads: 1, gpu: 'cpu', heartbeat_ms: 100, max_queue: 1 } },
    });
    client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
  });

  after(async () => {
    await stack?.stop();
  });

  async function loopState(): Promise<{ inFlight: number; queued: number }> {
    const model = (await stack.fleet())?.workers[0]?.models.find((m) => m.id === 'cortex-loop');
    return { inFlight: model?.inFlight ?? -1, queued: model?.queued ?? -1 };
  }

  it('admission - a full queue is a 429 with Retry-After, and a cancelled request frees its slot for the queued one', async () => {
    const first = new AbortController();
    const running = await client.chat.completions.create(
      { model: 'cortex-loop', messages: user, stream: true, max_tokens: 4000 },
      { signal: first.signal },
    );
    const iterator = running[Symbol.asyncIterator]();
    await iterator.next(); // the first request now holds the only slot

    const queued = client.chat.completions.create({ model: 'cortex-loop', messages: user, max_tokens: 5 });
    await waitFor(async () => (await loopState()).queued === 1, 5_000);

    const rejected = await postJson(`${stack.baseUrl}/v1/chat/completions`, {
      model: 'cortex-loop',
      messages: user,
      max_tokens: 5,
    });
    assert.equal(rejected.status, 429);
    assert.ok(Number(rejected.headers.get('retry-after')) >= 1);
    assert.equal(((await rejected.json()) as { error: { code: string } }).error.code, 'busy');

    first.abort();
    const result = await queued;
    assert.equal(result.choices[0]?.finish_reason, 'length');
    assert.equal(result.usage?.completion_tokens, 5);
    assert.ok(result.choices[0]?.message.content?.startsWith(loop.expected.text));
    await waitFor(async () => {
      const state = await loopState();
      return state.inFlight === 0 && state.queued === 0;
    }, 5_000);
  });

  it('admission - stop strings end generation without leaking any part of the stop text', async () => {
    const result = await client.chat.completions.create({
      model: 'cortex-loop',
      messages: user,
      max_tokens: 50,
      stop: ['we go.Ro'],
    });
    assert.equal(result.choices[0]?.message.content, 'Round and round ');
    assert.equal(result.choices[0]?.finish_reason, 'stop');
    const streamed = await client.chat.completions
      .stream({ model: 'cortex-loop', messages: user, max_tokens: 50, stop: ['round we'] })
      .finalChatCompletion();
    assert.equal(streamed.choices[0]?.message.content, 'Round and ');
  });

  it('admission - max_tokens ends with finish_reason length and exact usage', async () => {
    const result = await client.chat.completions.create({ model: 'cortex-loop', messages: user, max_tokens: 7 });
    assert.equal(result.choices[0]?.finish_reason, 'length');
    assert.equal(result.usage?.completion_tokens, 7);
    assert.equal(result.choices[0]?.message.content, `${loop.expected.text}${loop.expected.text}Round`);
  });
});
