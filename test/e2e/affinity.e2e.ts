import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { BusClient } from '@cortex/bus';
import {
  everyWorker,
  decodeFleetView,
  Subjects,
  type PlaceRequest,
  type RequestFinishedEvent,
} from '@cortex/contracts';
import { startStack, waitFor, watchBus, type TestStack } from '@cortex/testing';

type Turn = { role: 'user' | 'assistant'; content: string };

/**
 * Two workers both hold cortex-chat. Without a conversation key equally loaded workers take turns;
 * with one, every follow-up goes back to the worker that holds the conversation's prefix.
 */
describe('affinity e2e', () => {
  let stack: TestStack;
  let openai: OpenAI;
  let anthropic: Anthropic;
  let finished: Awaited<ReturnType<typeof watchBus<RequestFinishedEvent>>>;

  before(async () => {
    stack = await startStack({
      services: ['router', 'translator', 'worker', 'gateway'],
      models: [
        { id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: 1024, slots: 2 },
        { id: 'cortex-loop', file: 'fixture:cortex-loop', context_size: 4096, slots: 2 },
        // Never loaded here: a bad request naming it must not load it (see the ready-only test).
        { id: 'cortex-cold', file: 'fixture:cortex-chat', context_size: 512, slots: 1 },
      ],
      config: { worker: { id: 'w1', heartbeat_ms: 200 } },
    });
    stack.spawnService('worker', { CORTEX_WORKER_ID: 'w2' });
    const bus = new BusClient(stack.nc, 10_000);
    await stack.workersUp(2);
    for (const worker of ['w1', 'w2'])
      for (const model of ['cortex-chat', 'cortex-loop']) await bus.request(Subjects.routerLoad, { model, worker });
    openai = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    anthropic = new Anthropic({ baseURL: stack.baseUrl, apiKey: 'unused', maxRetries: 0 });
    finished = await watchBus<RequestFinishedEvent>(stack.nc, Subjects.requestFinished);
  });

  after(async () => {
    await finished?.stop();
    await stack?.stop();
  });

  /** The worker each of the last `n` requests ran on, once their request-finished events are in. */
  async function workersOfLast(n: number, before: number): Promise<string[]> {
    await waitFor(() => finished.messages.length >= before + n, 5_000);
    return finished.messages.slice(before, before + n).map((e) => e.workerId ?? 'none');
  }

  async function chatConversation(
    turns: number,
    headers: Record<string, string>,
    body: Record<string, unknown> = {},
  ): Promise<number[]> {
    const messages: Turn[] = [];
    const cached: number[] = [];
    for (let turn = 0; turn < turns; turn++) {
      messages.push({ role: 'user', content: `Question number ${turn + 1}, please.` });
      const reply = await openai.chat.completions.create({ model: 'cortex-chat', messages, ...body }, { headers });
      messages.push({ role: 'assistant', content: reply.choices[0]?.message.content ?? '' });
      cached.push(reply.usage?.prompt_tokens_details?.cached_tokens ?? 0);
    }
    return cached;
  }

  it('affinity - new conversations without a key spread: equally loaded workers take turns', async () => {
    const seen = finished.messages.length;
    await openai.chat.completions.create({
      model: 'cortex-chat',
      messages: [{ role: 'user', content: 'A first conversation.' }],
    });
    await openai.chat.completions.create({
      model: 'cortex-chat',
      messages: [{ role: 'user', content: 'Another conversation.' }],
    });
    const [first, second] = await workersOfLast(2, seen);
    assert.notEqual(first, second, 'consecutive new conversations spread over both workers');
  });

  it('affinity - without any key, the follow-ups of conversations taking turns land where their prompt was evaluated and report it cached', async () => {
    const seen = finished.messages.length;
    type Said = { prompt: number; cached: number };
    // Three conversations taking turns (an odd number: equally loaded workers taking turns would move
    // each to the other worker every turn), in chat and Messages alike.
    const dialects = ['chat', 'messages', 'chat'] as const;
    const histories: Turn[][] = dialects.map(() => []);
    const said: Said[][] = dialects.map(() => []);
    const turns = 3;
    for (let turn = 0; turn < turns; turn++) {
      for (const [c, dialect] of dialects.entries()) {
        const history = histories[c] as Turn[];
        history.push({
          role: 'user',
          content: `Conversation ${c} wants answer ${turn + 1} about ${'tides '.repeat(20 + c)}`,
        });
        if (dialect === 'chat') {
          const reply = await openai.chat.completions.create({
            model: 'cortex-chat',
            messages: history,
            max_tokens: 16,
          });
          history.push({ role: 'assistant', content: reply.choices[0]?.message.content ?? '' });
          said[c]?.push({
            prompt: reply.usage?.prompt_tokens ?? 0,
            cached: reply.usage?.prompt_tokens_details?.cached_tokens ?? 0,
          });
        } else {
          // Streamed: message_start already says what was read from the cache, as the final usage does.
          const stream = await anthropic.messages.create({
            model: 'cortex-chat',
            max_tokens: 16,
            messages: history,
            stream: true,
          });
          let text = '';
          let atStart: { input: number; cached: number } | null = null;
          for await (const event of stream) {
            if (event.type === 'message_start')
              atStart = {
                input: event.message.usage.input_tokens,
                cached: event.message.usage.cache_read_input_tokens ?? 0,
              };
            if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') text += event.delta.text;
            if (event.type === 'message_delta') {
              const cached = event.usage.cache_read_input_tokens ?? 0;
              assert.deepEqual(
                atStart,
                { input: event.usage.input_tokens, cached },
                'message_start and the final usage agree',
              );
              said[c]?.push({ prompt: (event.usage.input_tokens ?? 0) + cached, cached });
            }
          }
          history.push({ role: 'assistant', content: text || '…' });
        }
      }
    }
    // Requests went out round robin: conversation c's turn t is request t * 3 + c.
    const workers = await workersOfLast(turns * dialects.length, seen);
    for (const c of dialects.keys()) {
      const own = Array.from({ length: turns }, (_, turn) => workers[turn * dialects.length + c]);
      assert.equal(new Set(own).size, 1, `conversation ${c} stayed on one worker: ${own.join(', ')}`);
      const sent = said[c] ?? [];
      for (let turn = 1; turn < sent.length; turn++) {
        const before = sent[turn - 1]?.prompt ?? 0;
        assert.ok(
          (sent[turn]?.cached ?? 0) >= before - 1,
          `conversation ${c} turn ${turn + 1} found the ${before} tokens it had sent evaluated: ${JSON.stringify(sent)}`,
        );
      }
    }
    assert.equal(new Set(workers).size, 2, 'the conversations spread over both workers');
  });

  it('affinity - a session header keeps a conversation on one worker, which reuses its prefix', async () => {
    const seen = finished.messages.length;
    const cached = await chatConversation(4, { 'x-session-id': 'chat-session-1' });
    const workers = await workersOfLast(4, seen);
    assert.equal(new Set(workers).size, 1, `all turns on one worker: ${workers.join(', ')}`);
    for (const [turn, tokens] of cached.slice(1).entries())
      assert.ok(tokens > 0, `turn ${turn + 2} read its prefix from the cache (${cached.join(', ')})`);
  });

  it('affinity - prompt_cache_key does the same for a client that sends no session header', async () => {
    const seen = finished.messages.length;
    await chatConversation(3, {}, { prompt_cache_key: 'agent-7' });
    assert.equal(new Set(await workersOfLast(3, seen)).size, 1);
  });

  it('affinity - a previous_response_id chain follows its first response', async () => {
    const seen = finished.messages.length;
    let previous: string | undefined;
    const cached: number[] = [];
    for (let turn = 0; turn < 3; turn++) {
      const response = await openai.responses.create({
        model: 'cortex-chat',
        input: `Step ${turn + 1}.`,
        ...(previous && { previous_response_id: previous }),
      });
      previous = response.id;
      cached.push(response.usage?.input_tokens_details.cached_tokens ?? 0);
    }
    assert.equal(new Set(await workersOfLast(3, seen)).size, 1);
    assert.ok(
      cached.slice(1).every((tokens) => tokens > 0),
      `follow-ups reuse the prefix: ${cached.join(', ')}`,
    );
  });

  it('affinity - a chain begun under a session header keeps that worker when follow-ups send no header', async () => {
    const seen = finished.messages.length;
    const first = await openai.responses.create(
      { model: 'cortex-chat', input: 'Begin.' },
      { headers: { 'x-session-id': 'responses-session' } },
    );
    let previous = first.id;
    for (let turn = 0; turn < 2; turn++)
      previous = (
        await openai.responses.create({ model: 'cortex-chat', input: `Go on ${turn}.`, previous_response_id: previous })
      ).id;
    const workers = await workersOfLast(3, seen);
    assert.equal(
      new Set(workers).size,
      1,
      `the stored response keeps the key its turn ran under: ${workers.join(', ')}`,
    );
  });

  it('affinity - Claude Code sessions (metadata.user_id) stay on one worker', async () => {
    const seen = finished.messages.length;
    const metadata = {
      user_id: JSON.stringify({
        device_id: 'd1',
        account_uuid: '',
        session_id: '5c0d2b1e-5a47-4d1b-9d7e-2f3f1d0b9a11',
      }),
    };
    const messages: Turn[] = [];
    for (let turn = 0; turn < 3; turn++) {
      messages.push({ role: 'user', content: `Task ${turn + 1}.` });
      const reply = await anthropic.messages.create({ model: 'cortex-chat', max_tokens: 64, messages, metadata });
      messages.push({
        role: 'assistant',
        content: reply.content.map((block) => (block.type === 'text' ? block.text : '')).join(''),
      });
    }
    assert.equal(new Set(await workersOfLast(3, seen)).size, 1);
  });

  it('affinity - a Responses request that continues a stored one asks the router while the translator decodes, ready-only; a bad body never loads a model', async () => {
    // A body that continues nothing stored decodes in the gateway; one that continues a response goes to the translator.
    const first = await openai.responses.create({ model: 'cortex-chat', input: 'Hi.', prompt_cache_key: 'ready-only' });
    const asks = await watchBus<PlaceRequest>(stack.nc, Subjects.routerPlace);
    try {
      const reply = await openai.responses.create({
        model: 'cortex-chat',
        previous_response_id: first.id,
        input: 'Hi again.',
        prompt_cache_key: 'ready-only',
      });
      assert.equal(reply.status, 'completed');
      await asks.stop();
      assert.deepEqual(
        asks.messages.map((ask) => ({ model: ask.model, affinity: ask.affinity, readyOnly: ask.readyOnly })),
        [{ model: 'cortex-chat', affinity: 'pck:ready-only', readyOnly: true }],
        'a model ready on a worker is placed by the ask sent while decoding, and by no other',
      );
    } finally {
      await asks.stop();
    }
    const bad = await watchBus<PlaceRequest>(stack.nc, Subjects.routerPlace);
    try {
      await assert.rejects(
        openai.responses.create({
          model: 'cortex-cold',
          previous_response_id: first.id,
          input: 7 as never,
          prompt_cache_key: 'cold',
        }),
        (error: InstanceType<typeof OpenAI.APIError>) => {
          assert.equal(error.status, 400);
          assert.match(error.message, /input/);
          return true;
        },
      );
      // Bodies that continue nothing stored decode in the gateway: a bad one is refused before any router hears of it.
      await assert.rejects(
        openai.responses.create({ model: 'cortex-cold', input: 7 as never, prompt_cache_key: 'cold' }),
        (error: InstanceType<typeof OpenAI.APIError>) => {
          assert.equal(error.status, 400);
          assert.match(error.message, /input/);
          return true;
        },
      );
      await assert.rejects(
        openai.chat.completions.create({ model: 'cortex-cold', messages: 'not a list' as never }),
        (error: InstanceType<typeof OpenAI.APIError>) => {
          assert.equal(error.status, 400);
          assert.match(error.message, /messages/);
          return true;
        },
      );
      await bad.stop();
      assert.deepEqual(
        bad.messages.map((ask) => ask.readyOnly),
        [true],
        "only the continuing Responses body's ready-only ask went out; decoding failed before a real placement",
      );
      const fleet = await new BusClient(stack.nc, 5_000).request(Subjects.routerFleet, {}, { decode: decodeFleetView });
      const cold = fleet.workers.flatMap((worker) => worker.models.filter((model) => model.id === 'cortex-cold'));
      assert.deepEqual(cold, [], 'the invalid requests started no load of the model they named');
    } finally {
      await bad.stop();
    }
  });

  it("affinity - a worker that stalls on generate is replaced, and its late events never reach the new try's stream", async () => {
    const headers = { 'x-session-id': 'stalls' };
    const seen = finished.messages.length;
    await openai.chat.completions.create(
      { model: 'cortex-loop', messages: [{ role: 'user', content: 'Go.' }], max_tokens: 4 },
      { headers },
    );
    const [stalled] = await workersOfLast(1, seen);
    const worker =
      stack.processes.get(stalled === 'w1' ? 'worker' : 'worker#1') ?? assert.fail(`no process for ${stalled}`);
    // The conversation's worker stops (SIGSTOP: it keeps its subscriptions) just before its follow-up:
    // the follow-up is placed on it, its generate goes unanswered, and the gateway tries the other.
    worker.kill('SIGSTOP');
    let resumed = false;
    try {
      const stream = await openai.chat.completions.create(
        {
          model: 'cortex-loop',
          messages: [{ role: 'user', content: 'Go.' }],
          max_tokens: 3000,
          stream: true,
          stream_options: { include_usage: true },
        },
        { headers },
      );
      let finish: string | null = null;
      let tokens = 0;
      for await (const chunk of stream) {
        // Resumed mid-stream: it now runs the generate it was sent, under the first try's run id.
        if (!resumed && chunk.choices[0]?.delta?.content) {
          worker.kill('SIGCONT');
          resumed = true;
        }
        finish = chunk.choices[0]?.finish_reason ?? finish;
        tokens = chunk.usage?.completion_tokens ?? tokens;
      }
      assert.ok(resumed, 'the stream carried content');
      assert.equal(finish, 'length');
      assert.equal(tokens, 3000);
      const [served] = await workersOfLast(1, seen + 1);
      assert.notEqual(served, stalled, 'the other worker served the follow-up');
    } finally {
      if (!resumed) worker.kill('SIGCONT');
    }
  });

  it('affinity - a restarted router rebuilds the fleet from heartbeats and keeps its bindings from KV', async () => {
    const session = { 'x-session-id': 'survives-a-router-restart' };
    let seen = finished.messages.length;
    await chatConversation(1, session);
    const [bound] = await workersOfLast(1, seen);
    const loads = await watchBus<{ model: string }>(stack.nc, everyWorker(Subjects.modelLoaded));
    const router = stack.processes.get('router');
    assert.ok(router, 'the router process');
    router.kill('SIGKILL');
    stack.spawnService('router');
    await waitFor(async () => {
      const fleet = await stack.fleet();
      return (
        fleet?.workers.filter((w) => w.up && w.models.some((m) => m.id === 'cortex-chat' && m.state === 'ready'))
          .length === 2
      );
    }, 30_000);
    seen = finished.messages.length;
    await chatConversation(3, session);
    const workers = await workersOfLast(3, seen);
    await loads.stop();
    assert.deepEqual(workers, [bound, bound, bound], 'the new router sends the session where the old one did');
    assert.equal(loads.messages.length, 0, 'nothing was loaded again');
  });
});
