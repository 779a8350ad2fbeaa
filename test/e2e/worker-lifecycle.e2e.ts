import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { BusClient } from '@cortex/bus';
import {
  decodeUnloadResult,
  streamSubject,
  Subjects,
  workerSubject,
  type LoadProgress,
  type StreamEvent,
} from '@cortex/contracts';
import { fixtureModel } from '@cortex/fixtures';
import { postJson, postSse, startStack, waitFor, watchBus, type TestStack } from '@cortex/testing';

const user = [{ role: 'user' as const, content: 'Go.' }];

describe('worker lifecycle e2e', () => {
  let stack: TestStack;
  let client: OpenAI;
  let bus: BusClient;

  before(async () => {
    stack = await startStack({
      models: [
        { id: 'cortex-loop', file: 'fixture:cortex-loop', context_size: 32768, slots: 1, pinned: true },
        { id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: 512, slots: 1 },
      ],
      config: { worker: { id: 'w1', threads: 1, gpu: 'cpu', heartbeat_ms: 100 } },
    });
    client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    bus = new BusClient(stack.nc, 10_000);
  });

  after(async () => {
    await stack?.stop();
  });

  async function chatState(): Promise<string | undefined> {
    return (await stack.fleet())?.workers[0]?.models.find((m) => m.id === 'cortex-chat')?.state;
  }

  it('lifecycle - a cold load publishes progress events and reports the model ready', async () => {
    const events = await watchBus<LoadProgress>(stack.nc, Subjects.modelProgressed);
    const progress = events.messages;
    const result = await client.chat.completions.create({ model: 'cortex-chat', messages: user });
    assert.equal(result.choices[0]?.message.content, fixtureModel('cortex-chat').expected.text);
    await waitFor(() => progress.some((p) => p.fraction === 1), 2_000);
    await events.stop();
    assert.ok(progress.every((p) => p.model === 'cortex-chat' && p.workerId === 'w1'));
    assert.deepEqual(
      progress.map((p) => p.fraction),
      [...progress.map((p) => p.fraction)].sort((a, b) => a - b),
    );
  });

  it('lifecycle - unload frees the model and the next request loads it again', async () => {
    const result = await bus.request(
      workerSubject(Subjects.workerUnload, 'w1'),
      { model: 'cortex-chat' },
      { decode: decodeUnloadResult },
    );
    assert.deepEqual(result, { model: 'cortex-chat', workerId: 'w1', cancelled: 0, reason: 'admin' });
    await waitFor(async () => (await chatState()) === undefined, 3_000);
    const models = await client.models.list();
    assert.equal((models.data.find((m) => m.id === 'cortex-chat') as unknown as { loaded: boolean }).loaded, false);
    const again = await client.chat.completions.create({ model: 'cortex-chat', messages: user });
    assert.equal(again.choices[0]?.message.content, fixtureModel('cortex-chat').expected.text);
    assert.equal(await chatState(), 'ready');
  });

  it('lifecycle - a stream that waits for a cold load shows its progress, as comments and on request as reasoning', async () => {
    await bus.request(
      workerSubject(Subjects.workerUnload, 'w1'),
      { model: 'cortex-chat' },
      { decode: decodeUnloadResult },
    );
    await waitFor(async () => (await chatState()) === undefined, 3_000);
    const body = { model: 'cortex-chat', messages: user, stream: true };
    const cold = await postSse(`${stack.baseUrl}/v1/chat/completions`, body, { 'x-cortex-load-progress': 'reasoning' });
    assert.equal(cold.status, 200);
    assert.match(cold.raw, /^: loading cortex-chat on w1: 100%$/m);
    const chunks = cold.messages
      .filter((m) => m.data !== '[DONE]')
      .map(
        (m) => JSON.parse(m.data) as { choices: Array<{ delta: { content?: string; reasoning_content?: string } }> },
      );
    const reasoning = chunks.map((c) => c.choices[0]?.delta.reasoning_content ?? '').join('');
    const content = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
    assert.match(reasoning, /^(loading cortex-chat on w1: \d+%\n)+$/);
    assert.match(reasoning, /: 100%\n$/);
    assert.equal(content, fixtureModel('cortex-chat').expected.text);
    // Warm, and without the header: nothing but the answer.
    const warm = await postSse(`${stack.baseUrl}/v1/chat/completions`, body);
    assert.doesNotMatch(warm.raw, /loading/);
  });

  it('lifecycle - unloading a model that is not there is a clear not_found', async () => {
    await assert.rejects(
      bus.request(workerSubject(Subjects.workerUnload, 'w1'), { model: 'nope' }),
      /nope is not loaded on w1/,
    );
  });

  it('lifecycle - a generation cancelled while it waits for a slot ends with the error code cancelled, not internal', async () => {
    const [running, queued] = [`cancel-run-${Date.now()}`, `cancel-queued-${Date.now()}`];
    const events = await watchBus<StreamEvent>(stack.nc, streamSubject('w1', queued));
    const first = await watchBus<StreamEvent>(stack.nc, streamSubject('w1', running));
    const command = (id: string) => ({
      runId: id,
      streamSubject: streamSubject('w1', id),
      request: { model: 'cortex-loop', messages: user, sampling: { maxTokens: 30_000 }, stream: true },
    });
    const generate = workerSubject(Subjects.workerGenerate, 'w1');
    await bus.request(generate, command(running));
    // cortex-loop has one slot: the second waits for it until it is cancelled.
    await bus.request(generate, command(queued));
    await bus.request(workerSubject(Subjects.workerCancel, 'w1'), { runId: queued, reason: 'client went away' });
    const errors = () =>
      events.messages.filter((e): e is Extract<StreamEvent, { type: 'error' }> => e.type === 'error');
    await waitFor(() => errors().length > 0, 10_000);
    await bus.request(workerSubject(Subjects.workerCancel, 'w1'), { runId: running, reason: 'test over' });
    // The slot is free again only once the running one has ended; the next test needs it.
    await waitFor(() => first.messages.some((e) => e.type === 'finish' || e.type === 'error'), 20_000);
    await first.stop();
    await events.stop();
    assert.equal(errors()[0]?.error.code, 'cancelled');
    assert.equal(errors()[0]?.error.message, 'client went away');
  });

  it('lifecycle - a stream whose gateway dies is cancelled by the worker, freeing the slot', async () => {
    const events = await watchBus<StreamEvent>(stack.nc, Subjects.streamsAll);
    const finishes = () =>
      events.messages.filter((e): e is Extract<StreamEvent, { type: 'finish' }> => e.type === 'finish');
    // ~30k tokens take well over the 6 s a worker waits for a watch, so only cancellation ends it early.
    const stream = await client.chat.completions.create({
      model: 'cortex-loop',
      messages: user,
      stream: true,
      max_tokens: 30_000,
    });
    const iterator = stream[Symbol.asyncIterator]();
    await iterator.next();
    const gateway = stack.processes.get('gateway');
    assert.ok(gateway);
    gateway.kill('SIGKILL');
    await waitFor(() => finishes().length > 0, 20_000);
    await events.stop();
    assert.equal(finishes()[0]?.reason, 'cancelled');
    assert.ok((finishes()[0]?.usage.completionTokens ?? 0) < 30_000);
    assert.match(stack.logs(), /no gateway is reading it any more; cancelling/);
  });
});

describe('worker memory budget e2e', () => {
  let stack: TestStack;

  before(async () => {
    stack = await startStack({
      models: [{ id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: 512 }],
      config: { worker: { threads: 1, gpu: 'cpu', heartbeat_ms: 100, memory_budget: 1024 * 1024 } },
    });
  });

  after(async () => {
    await stack?.stop();
  });

  it('memory - a model that does not fit the budget is refused with the numbers and what to do', async () => {
    const response = await postJson(`${stack.baseUrl}/v1/chat/completions`, { model: 'cortex-chat', messages: user });
    assert.equal(response.status, 503);
    const body = (await response.json()) as { error: { code: string; message: string } };
    assert.equal(body.error.code, 'insufficient_memory');
    assert.match(
      body.error.message,
      /cortex-chat needs about \d+ MiB and no worker can make room: \S+ has the most free \(1 MiB\)/,
    );
    assert.match(body.error.message, /raise worker\.memory_budget/);
  });
});
