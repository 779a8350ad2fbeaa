import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { Kvm } from '@nats-io/kv';
import { fixtureModel } from '@cortex/fixtures';
import { Subjects, workerSubject } from '@cortex/contracts';
import { BusClient } from '@cortex/bus';
import { SseParser, type SseMessage } from '@cortex/wire';
import {
  OpenResponsesSchema,
  postJson,
  postSse,
  startStack,
  waitFor,
  watchBus,
  FIXTURE_CATALOGUE,
  type TestStack,
} from '@cortex/testing';

const chat = fixtureModel('cortex-chat');
const loop = fixtureModel('cortex-loop');

type Resource = {
  id: string;
  status: string;
  output_text?: string;
  usage: { output_tokens: number } | null;
  output: unknown[];
} & Record<string, unknown>;
const isTerminal = (status: string) => ['completed', 'incomplete', 'failed', 'cancelled'].includes(status);

type Frame = { type: string; sequence_number: number } & Record<string, unknown>;

describe('responses background e2e', () => {
  let stack: TestStack;
  let client: OpenAI;
  const schema = new OpenResponsesSchema();

  before(async () => {
    stack = await startStack({
      models: [
        ...FIXTURE_CATALOGUE,
        { id: 'cortex-loop', file: 'fixture:cortex-loop', context_size: 4096, slots: 2, pinned: true },
        // Its file does not exist: every load fails (a background run that never gets a worker).
        { id: 'cortex-missing', file: 'missing/cortex-missing.gguf', context_size: 512 },
      ],
    });
    client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
  });

  after(async () => {
    await stack?.stop();
  });

  const get = async (id: string): Promise<Resource> => {
    const reply = await fetch(`${stack.baseUrl}/v1/responses/${id}`);
    const body = (await reply.json()) as Resource;
    assert.equal(reply.status, 200, JSON.stringify(body));
    return body;
  };
  /** The resource as stored or rebuilt, checked against the spec (the derived `output_text` aside). */
  const valid = (resource: Resource): Resource => {
    const { output_text: _text, ...rest } = resource;
    assert.equal(schema.check('ResponseResource', rest), null);
    return resource;
  };
  const until = async (id: string, done: (resource: Resource) => boolean): Promise<Resource> => {
    let last: Resource | null = null;
    await waitFor(async () => done((last = await get(id))), 60_000, 100);
    return valid(last as unknown as Resource);
  };
  /** `GET …?stream=true`, every event checked against the spec's schema for its type. */
  const streamFrom = async (id: string, startingAfter?: number, onFirst?: () => Promise<void>): Promise<Frame[]> => {
    const query = startingAfter === undefined ? 'stream=true' : `stream=true&starting_after=${startingAfter}`;
    const reply = await fetch(`${stack.baseUrl}/v1/responses/${id}?${query}`);
    assert.equal(reply.status, 200);
    const parser = new SseParser();
    const messages: SseMessage[] = [];
    const decoder = new TextDecoder();
    for await (const chunk of (reply.body ?? []) as unknown as AsyncIterable<Uint8Array>) {
      const first = messages.length === 0;
      messages.push(...parser.push(decoder.decode(chunk as Uint8Array, { stream: true })));
      if (first && messages.length > 0) await onFirst?.();
    }
    assert.equal(messages.at(-1)?.data, '[DONE]');
    const frames = messages.slice(0, -1).map((message) => JSON.parse(message.data) as Frame);
    for (const frame of frames) assert.equal(schema.checkEvent(frame), null, `${frame.type} matches the spec`);
    return frames;
  };

  it('responses background e2e - create answers at once (queued), and GET polls it to completed', async () => {
    const finished = await watchBus<{ finishReason: string | null; usage: { completionTokens: number } | null }>(
      stack.nc,
      Subjects.requestFinished,
    );
    const created = (await client.responses.create({
      model: 'cortex-chat',
      input: 'Say hello.',
      background: true,
    })) as unknown as Resource;
    assert.equal(created.status, 'queued');
    assert.equal(created.background, true);
    valid(created);
    const done = await until(created.id, (r) => r.status === 'completed');
    assert.equal(done.background, true);
    // The gateway that started it counts it like any request, with its usage.
    await waitFor(() => finished.messages.length > 0, 10_000);
    await finished.stop();
    assert.equal(finished.messages[0]?.finishReason, 'stop');
    assert.equal(finished.messages[0]?.usage?.completionTokens, chat.completionTokens);
    assert.equal((await client.responses.retrieve(created.id)).output_text, chat.expected.text);
    // A background response continues like any stored one.
    const next = await client.responses.create({
      model: 'cortex-chat',
      previous_response_id: created.id,
      input: 'Again.',
    });
    assert.equal(next.output_text, chat.expected.text);
  });

  it('responses background e2e - a background turn joins its conversation once, when it ends', async () => {
    const conversation = `conv_bg_${Date.now()}`;
    const created = (await client.responses.create({
      model: 'cortex-chat',
      input: 'Say hello.',
      conversation,
      background: true,
    } as never)) as unknown as Resource;
    // Reads race the translators' own finishing of the response; only one of them may append.
    await Promise.all([
      until(created.id, (r) => r.status === 'completed'),
      until(created.id, (r) => r.status === 'completed'),
    ]);
    const entry = await (await new Kvm(stack.nc).open('cortex_conversations')).get(conversation);
    const items = (entry?.json<{ items: Array<{ type: string; role?: string }> }>().items ?? []).map(
      (item) => `${item.type}:${item.role}`,
    );
    assert.deepEqual(items, ['message:user', 'message:assistant']);
  });

  it('responses background e2e - background with stream: the events come from the kept run, valid and numbered from 0', async () => {
    const { status, messages } = await postSse(`${stack.baseUrl}/v1/responses`, {
      model: 'cortex-chat',
      input: 'Say hello.',
      background: true,
      stream: true,
    });
    assert.equal(status, 200);
    assert.equal(messages.at(-1)?.data, '[DONE]');
    const frames = messages.slice(0, -1).map((message) => JSON.parse(message.data) as Frame & { response?: Resource });
    for (const frame of frames) assert.equal(schema.checkEvent(frame), null, `${frame.type} matches the spec`);
    frames.forEach((frame, i) => assert.equal(frame.sequence_number, i));
    assert.equal(frames[0]?.response?.background, true);
    const last = frames.at(-1);
    assert.equal(last?.type, 'response.completed');
    assert.equal((await get(String(last?.response?.id))).status, 'completed');
  });

  it('responses background e2e - a run refused before it starts (a prompt over the context) fails at once, live and stored', async () => {
    const input = 'many words '.repeat(400);
    const { status, messages } = await postSse(`${stack.baseUrl}/v1/responses`, {
      model: 'cortex-chat',
      input,
      background: true,
      stream: true,
    });
    assert.equal(status, 200);
    assert.equal(messages.at(-1)?.data, '[DONE]');
    const frames = messages
      .slice(0, -1)
      .map(
        (message) =>
          JSON.parse(message.data) as Frame & { response?: Resource & { error?: { code: string; message: string } } },
      );
    for (const frame of frames) assert.equal(schema.checkEvent(frame), null, `${frame.type} matches the spec`);
    const last = frames.at(-1);
    assert.equal(last?.type, 'response.failed');
    assert.match(String(last?.response?.error?.message), /context of 512/, "the worker's own reason, not a timeout");
    const stored = await until(String(last?.response?.id), (resource) => isTerminal(resource.status));
    assert.equal(stored.status, 'failed');
  });

  it('responses background e2e - a run that never gets a worker (its load fails) ends a follower at once with the reason', async () => {
    const { status, messages } = await postSse(`${stack.baseUrl}/v1/responses`, {
      model: 'cortex-missing',
      input: 'Hi.',
      background: true,
      stream: true,
    });
    assert.equal(status, 200);
    assert.equal(messages.at(-1)?.data, '[DONE]');
    const frames = messages
      .slice(0, -1)
      .map((message) => JSON.parse(message.data) as Frame & { response?: Resource & { error?: { message: string } } });
    for (const frame of frames) assert.equal(schema.checkEvent(frame), null, `${frame.type} matches the spec`);
    const last = frames.at(-1);
    assert.equal(last?.type, 'response.failed');
    assert.doesNotMatch(
      String(last?.response?.error?.message),
      /came in time/,
      "the load's own failure, not the follower's timeout",
    );
    assert.equal((await until(String(last?.response?.id), (resource) => isTerminal(resource.status))).status, 'failed');
  });

  it('responses background e2e - streams from starting_after while it runs, then replays the same events once done', async () => {
    const created = (await client.responses.create({
      model: 'cortex-loop',
      input: 'Go.',
      background: true,
      max_output_tokens: 2000,
    })) as unknown as Resource;
    await until(created.id, (r) => r.status === 'in_progress');
    // The first frames arrive while the run is still going: the stream follows it live.
    const live = await streamFrom(created.id, 2, async () =>
      assert.equal((await get(created.id)).status, 'in_progress'),
    );
    assert.equal(live[0]?.sequence_number, 3);
    live.forEach((frame, i) => assert.equal(frame.sequence_number, 3 + i, 'numbered on without gaps'));
    assert.equal(live.at(-1)?.type, 'response.incomplete');
    const text = live
      .filter((f) => f.type === 'response.output_text.delta')
      .map((f) => f.delta)
      .join('');
    assert.ok(text.startsWith(loop.expected.text), `the loop fixture's text, got ${text.slice(0, 40)}`);
    const done = await until(created.id, (r) => r.status === 'incomplete');
    assert.equal(done.usage?.output_tokens, 2000);
    // The whole run again, from the stored events: the same frames, the same numbers.
    const all = await streamFrom(created.id);
    assert.equal(all[0]?.type, 'response.created');
    assert.deepEqual(all.slice(3), live);
    assert.deepEqual((all.at(-1) as unknown as { response: Resource }).response.output, done.output);
  });

  it('responses background e2e - cancel stops a long run on its worker', async () => {
    const events = await watchBus<{ type: string; reason?: string }>(stack.nc, Subjects.backgroundAll);
    const created = (await client.responses.create({
      model: 'cortex-loop',
      input: 'Go on forever.',
      background: true,
      max_output_tokens: 3500,
    })) as unknown as Resource;
    await until(created.id, (r) => r.status === 'in_progress' && r.output.length > 0);
    const cancelled = (await client.responses.cancel(created.id)) as unknown as Resource;
    await events.stop();
    assert.equal(cancelled.status, 'cancelled');
    valid(cancelled);
    // The worker stopped the generation itself: its finish says cancelled, well short of the limit.
    const finish = events.messages.find((event) => event.type === 'finish');
    assert.equal(finish?.reason, 'cancelled');
    const stored = await until(created.id, (r) => r.status === 'cancelled');
    assert.ok((stored.usage?.output_tokens ?? 0) < 3500);
    // Cancelling an ended response answers it as it is; a foreground one cannot be cancelled.
    assert.equal(((await client.responses.cancel(created.id)) as unknown as Resource).status, 'cancelled');
    const foreground = await client.responses.create({ model: 'cortex-chat', input: 'Hi.' });
    await assert.rejects(
      client.responses.cancel(foreground.id),
      (error: unknown) => error instanceof OpenAI.BadRequestError && error.param === 'response_id',
    );
  });

  it('responses background e2e - a gateway killed mid-run: the run goes on on its worker, and a new gateway serves it', async () => {
    const created = (await client.responses.create({
      model: 'cortex-loop',
      input: 'Keep going.',
      background: true,
      max_output_tokens: 3000,
    })) as unknown as Resource;
    await until(created.id, (r) => r.status === 'in_progress' && r.output.length > 0);
    const events = await watchBus<{ type: string }>(stack.nc, Subjects.backgroundAll);
    const gateway = stack.processes.get('gateway');
    assert.ok(gateway);
    await new Promise<void>((exited) => {
      gateway.once('exit', () => exited());
      gateway.kill('SIGKILL');
    });
    const whileDown = events.messages.length;
    stack.spawnService('gateway');
    await waitFor(async () => (await fetch(`${stack.baseUrl}/v1/models`).catch(() => null))?.ok === true, 60_000);
    await events.stop();
    // Events kept coming while no gateway was up, so the run was still in flight when it died.
    assert.ok(events.messages.length > whileDown, 'the worker kept publishing after the gateway died');
    assert.ok(
      !events.messages.slice(0, whileDown).some((event) => event.type === 'finish'),
      'the run had not finished when the gateway died',
    );
    const done = await until(created.id, (r) => r.status === 'incomplete');
    assert.equal(done.usage?.output_tokens, 3000);
    // The official client streams it again from the restarted gateway.
    const replayed: Frame[] = [];
    for await (const event of await client.responses.retrieve(created.id, { stream: true, starting_after: 0 }))
      replayed.push(event as unknown as Frame);
    assert.equal(replayed[0]?.sequence_number, 1);
    assert.equal(replayed.at(-1)?.type, 'response.incomplete');
    for (const frame of replayed) assert.equal(schema.checkEvent(frame), null, `${frame.type} matches the spec`);
  });

  it('responses background e2e - background needs store; stream=true needs a background response', async () => {
    const unstored = await postJson(`${stack.baseUrl}/v1/responses`, {
      model: 'cortex-chat',
      input: 'Hi.',
      background: true,
      store: false,
    });
    assert.equal(unstored.status, 400);
    assert.equal(((await unstored.json()) as { error: { param: string } }).error.param, 'background');
    const foreground = await client.responses.create({ model: 'cortex-chat', input: 'Hi.' });
    const reply = await fetch(`${stack.baseUrl}/v1/responses/${foreground.id}?stream=true`);
    assert.equal(reply.status, 400);
    assert.equal(((await reply.json()) as { error: { param: string } }).error.param, 'stream');
    const created = (await client.responses.create({
      model: 'cortex-chat',
      input: 'Hi.',
      background: true,
    })) as unknown as Resource;
    const bad = await fetch(`${stack.baseUrl}/v1/responses/${created.id}?stream=true&starting_after=soon`);
    assert.equal(bad.status, 400);
    assert.equal(((await bad.json()) as { error: { param: string } }).error.param, 'starting_after');
  });

  it('responses background e2e - a run its worker stops (an unload that does not drain) fails, it is not cancelled', async () => {
    const created = (await client.responses.create({
      model: 'cortex-loop',
      input: 'Go.',
      background: true,
      max_output_tokens: 3500,
    })) as unknown as Resource;
    await until(created.id, (r) => r.status === 'in_progress' && r.output.length > 0);
    const workerId = (await stack.fleet())?.workers[0]?.workerId;
    assert.ok(workerId);
    await new BusClient(stack.nc, 10_000).request(workerSubject(Subjects.workerUnload, workerId), {
      model: 'cortex-loop',
      drain: false,
    });
    const failed = await until(created.id, (r) => isTerminal(r.status));
    assert.equal(failed.status, 'failed');
    assert.equal((failed.error as { code: string } | null)?.code, 'worker_lost');
    assert.match(String((failed.error as { message: string }).message), /unloaded/);
  });
});
