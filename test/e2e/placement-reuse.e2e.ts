import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { BusClient } from '@cortex/bus';
import { everyWorker, Subjects, type LoadResult, type PlaceRequest } from '@cortex/contracts';
import { fixtureModel } from '@cortex/fixtures';
import { startStack, waitFor, watchBus, type TestStack } from '@cortex/testing';

const chat = fixtureModel('cortex-chat');
const user = [{ role: 'user' as const, content: 'Say hello.' }];

/**
 * One worker holds cortex-chat: the router's answer cannot change until the fleet does, so the gateway
 * reuses it (`router.placement_reuse_ms`, long here so the test does not race the clock) and skips the
 * router. A worker that no longer has the model sends the request back through a router.
 */
describe('placement reuse e2e', () => {
  let stack: TestStack;
  let openai: OpenAI;
  let anthropic: Anthropic;
  let bus: BusClient;

  before(async () => {
    stack = await startStack({
      models: [{ id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: 1024, slots: 2 }],
      config: { router: { placement_reuse_ms: 60_000 } },
    });
    openai = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    anthropic = new Anthropic({ baseURL: stack.baseUrl, apiKey: 'unused', maxRetries: 0 });
    bus = new BusClient(stack.nc, 10_000);
  });

  after(async () => {
    await stack?.stop();
  });

  const ask = async (): Promise<string> =>
    (await openai.chat.completions.create({ model: 'cortex-chat', messages: user })).choices[0]?.message.content ?? '';

  it('placement reuse - a model only one worker holds is placed by the router once, then straight away', async () => {
    assert.equal(await ask(), chat.expected.text, 'the cold load');
    const asks = await watchBus<PlaceRequest>(stack.nc, Subjects.routerPlace);
    assert.equal(await ask(), chat.expected.text, 'placed by the router, which marks the answer reusable');
    assert.equal(await ask(), chat.expected.text);
    const reply = await anthropic.messages.create({ model: 'cortex-chat', max_tokens: 64, messages: user });
    assert.deepEqual(
      reply.content,
      [{ type: 'text', text: chat.expected.text }],
      'another dialect, same model and conversation: the same answer',
    );
    await asks.stop();
    assert.equal(asks.messages.length, 1, `one router ask for three requests, got ${asks.messages.length}`);

    // A new conversation is placed by the router, which binds its key.
    const keyed = await watchBus<PlaceRequest>(stack.nc, Subjects.routerPlace);
    await openai.chat.completions.create({ model: 'cortex-chat', messages: user, prompt_cache_key: 'reuse' });
    await openai.chat.completions.create({ model: 'cortex-chat', messages: user, prompt_cache_key: 'reuse' });
    await keyed.stop();
    assert.deepEqual(
      keyed.messages.map((place) => place.affinity),
      ['pck:reuse'],
    );

    // A Responses body that continues nothing stored decodes in the gateway and is placed like a chat body.
    const responses = await watchBus<PlaceRequest>(stack.nc, Subjects.routerPlace);
    const turns: string[] = [];
    for (let turn = 0; turn < 2; turn++) {
      const reply = await openai.responses.create({
        model: 'cortex-chat',
        input: 'Say hello.',
        prompt_cache_key: 'reuse-responses',
      });
      assert.equal(reply.output_text, chat.expected.text);
      turns.push(reply.id);
    }
    await responses.stop();
    assert.deepEqual(
      responses.messages.map((place) => ({ affinity: place.affinity, readyOnly: place.readyOnly === true })),
      [{ affinity: 'pck:reuse-responses', readyOnly: false }],
    );

    // One that continues a stored response asks early while the translator decodes, unless an answer is there to reuse.
    const continued = await watchBus<PlaceRequest>(stack.nc, Subjects.routerPlace);
    for (const id of turns)
      assert.equal(
        (
          await openai.responses.create({
            model: 'cortex-chat',
            previous_response_id: id,
            input: 'Again.',
            prompt_cache_key: 'reuse-continued',
          })
        ).output_text,
        chat.expected.text,
      );
    await continued.stop();
    assert.deepEqual(
      continued.messages.map((place) => ({ affinity: place.affinity, readyOnly: place.readyOnly })),
      [{ affinity: 'pck:reuse-continued', readyOnly: true }],
    );
  });

  it('placement reuse - a worker that lost the model sends the request back through a router, which loads it again', async () => {
    assert.equal(await ask(), chat.expected.text);
    await bus.request(Subjects.routerUnload, { model: 'cortex-chat' });
    const asks = await watchBus<PlaceRequest>(stack.nc, Subjects.routerPlace);
    const stream = await openai.chat.completions.create({ model: 'cortex-chat', messages: user, stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    assert.equal(
      text,
      chat.expected.text,
      'the reused placement was refused by the worker and the request placed again',
    );
    await asks.stop();
    assert.ok(asks.messages.length >= 1, 'the router was asked after the refusal');
    assert.ok(
      asks.messages.every((place) => (place.exclude ?? []).length === 0),
      'the worker was not held against: only its model had gone',
    );
  });

  it('placement reuse - a second worker that loads the model ends the reuse: the router is asked again', async () => {
    assert.equal(await ask(), chat.expected.text);
    const reused = await watchBus<PlaceRequest>(stack.nc, Subjects.routerPlace);
    assert.equal(await ask(), chat.expected.text);
    await reused.stop();
    assert.equal(reused.messages.length, 0, 'one worker holds the model: its answer is reused');

    stack.spawnService('worker', { CORTEX_WORKER_ID: 'w2' });
    await stack.workersUp(2);
    const loaded = await watchBus<LoadResult>(stack.nc, everyWorker(Subjects.modelLoaded));
    await bus.request(Subjects.routerLoad, { model: 'cortex-chat', worker: 'w2' });
    await waitFor(() => loaded.messages.some((event) => event.workerId === 'w2'), 10_000);
    await loaded.stop();

    // Two workers hold it now: each request is the router's to place (within the 60 s reuse).
    const asks = await watchBus<PlaceRequest>(stack.nc, Subjects.routerPlace);
    for (let i = 0; i < 2; i++) assert.equal(await ask(), chat.expected.text);
    await asks.stop();
    assert.equal(
      asks.messages.length,
      2,
      `two requests after the second load, two router asks; got ${asks.messages.length}`,
    );
  });
});
