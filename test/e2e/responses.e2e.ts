import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { Kvm } from '@nats-io/kv';
import { fixtureModel } from '@cortex/fixtures';
import { BusClient } from '@cortex/bus';
import { CortexError, decodeDecodedRequest, Subjects } from '@cortex/contracts';
import {
  OpenResponsesSchema,
  postJson,
  postSse,
  startStack,
  waitFor,
  FIXTURE_CATALOGUE,
  type TestStack,
} from '@cortex/testing';

const chat = fixtureModel('cortex-chat');
const reasoning = fixtureModel('cortex-reasoning');
const tools = fixtureModel('cortex-tools');
const weather = {
  type: 'function' as const,
  name: 'get_weather',
  description: 'Current weather',
  parameters: { type: 'object', properties: { city: { type: 'string' } } },
  strict: false,
};

describe('responses e2e', () => {
  let stack: TestStack;
  let client: OpenAI;
  const schema = new OpenResponsesSchema();

  before(async () => {
    stack = await startStack({
      models: FIXTURE_CATALOGUE.map((m) => ({ ...m, context_size: 1024 })),
      config: { responses: { reasoning_key: 'e2e shared secret' } },
    });
    client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
  });

  after(async () => {
    await stack?.stop();
  });

  it('responses e2e - create returns a complete ResponseResource with output_text', async () => {
    const response = await client.responses.create({
      model: 'cortex-chat',
      input: 'Say hello.',
      instructions: 'Be kind.',
      metadata: { run: 'e2e' },
    });
    assert.equal(response.object, 'response');
    assert.equal(response.status, 'completed');
    assert.equal(response.output_text, chat.expected.text);
    assert.equal(response.usage?.output_tokens, chat.completionTokens);
    assert.equal(response.instructions, 'Be kind.');
    assert.deepEqual(response.metadata, { run: 'e2e' });
    const { output_text: _text, ...resource } = response as unknown as Record<string, unknown>;
    assert.equal(schema.check('ResponseResource', resource), null);
  });

  it('responses e2e - store:false with encrypted reasoning: the sealed reasoning a client sends back is restored', async () => {
    const first = await client.responses.create({
      model: 'cortex-reasoning',
      input: 'Say hello.',
      store: false,
      include: ['reasoning.encrypted_content'],
    });
    const item = first.output.find((o) => o.type === 'reasoning');
    assert.ok(
      item?.type === 'reasoning' && typeof item.encrypted_content === 'string',
      'the reasoning item carries encrypted_content',
    );
    assert.doesNotMatch(item.encrypted_content ?? '', /greeting/);
    // Codex sends reasoning items back with summary and encrypted_content only; the translator (another
    // process from the gateway that sealed it) must restore the text into the assistant turn.
    const body = {
      model: 'cortex-reasoning',
      store: false,
      input: [
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Say hello.' }] },
        { type: 'reasoning', summary: [], encrypted_content: item.encrypted_content },
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: first.output_text }] },
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Again.' }] },
      ],
    };
    const decoded = await new BusClient(stack.nc, 10_000).request(
      Subjects.translatorDecode,
      { dialect: 'openai.responses', body },
      { decode: decodeDecodedRequest },
    );
    const assistant = decoded.request.messages.find((m) => m.role === 'assistant');
    assert.equal(assistant?.reasoning, reasoning.expected.reasoning);
    const next = await client.responses.create(body as unknown as OpenAI.Responses.ResponseCreateParamsNonStreaming);
    assert.equal(next.output_text, reasoning.expected.text);
  });

  it('responses e2e - malformed store, get and input_items payloads are invalid_request naming the field', async () => {
    const bus = new BusClient(stack.nc, 10_000);
    const state = { responseId: 'resp_bad', createdAt: 0, echo: {}, store: true, input: [] };
    const invalid = (param: string) => (error: Error) =>
      error instanceof CortexError && error.code === 'invalid_request' && error.extra.param === param;
    await assert.rejects(
      bus.request(Subjects.responsesStore, { state, resource: { id: 'resp_bad' } }),
      invalid('state.chain'),
    );
    await assert.rejects(bus.request(Subjects.responsesStore, { state: { ...state, chain: [] } }), invalid('resource'));
    await assert.rejects(
      bus.request(Subjects.responsesStore, {
        state: { ...state, chain: [], toolNamespaces: { lookup: 1 } },
        resource: { id: 'resp_bad' },
      }),
      invalid('state.toolNamespaces.lookup'),
    );
    const resource = { id: 'resp_bad', object: 'response', created_at: 0, completed_at: null, status: 'done' };
    await assert.rejects(
      bus.request(Subjects.responsesStore, { state: { ...state, chain: [] }, resource }),
      invalid('resource.status'),
    );
    await assert.rejects(bus.request(Subjects.responsesGet, { id: 42 }), invalid('id'));
    await assert.rejects(bus.request(Subjects.responsesDelete, []), invalid('payload'));
    await assert.rejects(
      bus.request(Subjects.responsesInputItems, { id: 'resp_bad', order: 'sideways' }),
      invalid('order'),
    );
  });

  it('responses e2e - a malformed stored response is reported naming the field, not served', async () => {
    const responses = await new Kvm(stack.nc).open('cortex_responses');
    await responses.put('resp_corrupt', JSON.stringify({ resource: 'gone', input: [] }));
    const reply = await fetch(`${stack.baseUrl}/v1/responses/resp_corrupt`);
    const body = (await reply.json()) as { error?: { message?: string } };
    assert.equal(reply.status, 500);
    assert.match(body.error?.message ?? '', /stored response resp_corrupt is malformed: resource: must be an object/);
  });

  it('responses e2e - stream() is accepted, events are numbered and valid against the spec', async () => {
    const final = await client.responses.stream({ model: 'cortex-chat', input: 'Say hello.' }).finalResponse();
    assert.equal(final.output_text, chat.expected.text);
    const { status, messages } = await postSse(`${stack.baseUrl}/v1/responses`, {
      model: 'cortex-chat',
      input: 'Say hello.',
      stream: true,
    });
    assert.equal(status, 200);
    assert.equal(messages.at(-1)?.data, '[DONE]');
    const events = messages
      .slice(0, -1)
      .map((m) => ({ name: m.event, data: JSON.parse(m.data) as { type: string; sequence_number: number } }));
    assert.deepEqual(
      events.map((e) => e.data.sequence_number),
      events.map((_, i) => i),
    );
    for (const event of events) {
      assert.equal(event.name, event.data.type);
      assert.equal(schema.checkEvent(event.data), null, `${event.data.type}`);
    }
    assert.deepEqual(
      events.slice(0, 2).map((e) => e.name),
      ['response.created', 'response.in_progress'],
    );
    assert.equal(events.at(-1)?.name, 'response.completed');
  });

  it('responses e2e - reasoning arrives as a reasoning item the openai client accepts', async () => {
    const final = await client.responses.stream({ model: 'cortex-reasoning', input: 'Say hello.' }).finalResponse();
    assert.equal(final.output_text, reasoning.expected.text);
    const item = final.output.find((o) => o.type === 'reasoning') as { content?: Array<{ text: string }> } | undefined;
    assert.equal(item?.content?.map((c) => c.text).join(''), reasoning.expected.reasoning);
    assert.ok((final.usage?.output_tokens_details.reasoning_tokens ?? 0) > 0);
  });

  it('responses e2e - Codex-style tools: hosted web_search dropped, a namespaced function called with its namespace', async () => {
    const body = {
      model: 'cortex-tools',
      input: 'Weather in Paris?',
      store: false,
      tools: [
        { type: 'web_search', external_web_access: false },
        { type: 'namespace', name: 'weather_v1', description: 'Weather tools', tools: [weather] },
      ],
    };
    const response = await postJson(`${stack.baseUrl}/v1/responses`, body);
    assert.equal(response.status, 200);
    const resource = (await response.json()) as {
      output: Array<{ type: string; name?: string; namespace?: string }>;
      tools: Array<{ name: string }>;
    };
    const call = resource.output.find((o) => o.type === 'function_call');
    assert.deepEqual([call?.name, call?.namespace], ['get_weather', 'weather_v1']);
    assert.deepEqual(
      resource.tools.map((tool) => tool.name),
      ['get_weather'],
    );
  });

  it('responses e2e - a function call, then its output via previous_response_id, gets the answer', async () => {
    const first = await client.responses.create({
      model: 'cortex-tools',
      input: 'Weather in Paris?',
      tools: [weather],
    });
    const call = first.output.find((o) => o.type === 'function_call');
    assert.ok(call && call.type === 'function_call');
    assert.equal(call.name, 'get_weather');
    assert.deepEqual(JSON.parse(call.arguments), tools.expected.toolCall?.arguments);

    const streamed = await client.responses
      .stream({ model: 'cortex-tools', input: 'Weather in Paris?', tools: [weather] })
      .finalResponse();
    assert.ok(streamed.output.some((o) => o.type === 'function_call' && o.name === 'get_weather'));

    const second = await client.responses.create({
      model: 'cortex-tools',
      previous_response_id: first.id,
      tools: [weather],
      input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"temp_c": 21}' }],
    });
    assert.equal(second.output_text, tools.expected.afterToolResult?.text);
    assert.equal(second.previous_response_id, first.id);

    // The same turn with tool_choice required and one call allowed: a call, not an answer, through stream().
    const forced = await client.responses
      .stream({
        model: 'cortex-tools',
        previous_response_id: first.id,
        tools: [weather],
        tool_choice: 'required',
        max_tool_calls: 1,
        input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"temp_c": 21}' }],
      })
      .finalResponse();
    assert.deepEqual(
      forced.output.map((o) => o.type),
      ['function_call'],
    );
    assert.equal((forced.output[0] as { name: string }).name, 'get_weather');
    assert.equal((forced as unknown as { max_tool_calls: number }).max_tool_calls, 1);
    const { output_text: _text, ...resource } = forced as unknown as Record<string, unknown>;
    assert.equal(schema.check('ResponseResource', resource), null);
  });

  it('responses e2e - retrieve, list input items with pagination, delete', async () => {
    const created = await client.responses.create({
      model: 'cortex-chat',
      input: [
        { role: 'user', content: 'one' },
        { role: 'assistant', content: 'two' },
        { role: 'user', content: 'three' },
      ],
    });
    const fetched = await client.responses.retrieve(created.id);
    assert.equal(fetched.id, created.id);
    assert.equal(fetched.output_text, chat.expected.text);

    const page = await client.responses.inputItems.list(created.id, { limit: 2, order: 'asc' });
    assert.equal(page.data.length, 2);
    assert.equal(page.has_more, true);
    const rest = await client.responses.inputItems.list(created.id, {
      limit: 2,
      order: 'asc',
      after: page.data[1]?.id,
    });
    assert.equal(rest.data.length, 1);
    assert.equal(rest.has_more, false);
    const texts = [...page.data, ...rest.data].map(
      (item) => (item as { content: Array<{ text: string }> }).content[0]?.text,
    );
    assert.deepEqual(texts, ['one', 'two', 'three']);

    await client.responses.delete(created.id);
    await assert.rejects(
      client.responses.retrieve(created.id),
      (error: unknown) => error instanceof OpenAI.NotFoundError,
    );
  });

  it('responses e2e - clear errors: unknown previous response, both ids, unstored background, cancel of a foreground one', async () => {
    await assert.rejects(
      client.responses.create({ model: 'cortex-chat', input: 'x', previous_response_id: 'resp_nope' }),
      (error: unknown) => {
        assert.ok(error instanceof OpenAI.NotFoundError);
        assert.equal(error.code, 'previous_response_not_found');
        assert.equal(error.param, 'previous_response_id');
        return true;
      },
    );
    await assert.rejects(
      client.responses.create({ model: 'cortex-chat', input: 'x', previous_response_id: 'resp_a', conversation: 'c1' }),
      (error: unknown) => error instanceof OpenAI.BadRequestError && error.param === 'previous_response_id',
    );
    await assert.rejects(
      client.responses.create({ model: 'cortex-chat', input: 'x', background: true, store: false }),
      (error: unknown) => error instanceof OpenAI.BadRequestError && error.param === 'background',
    );
    const stored = await client.responses.create({ model: 'cortex-chat', input: 'x' });
    await assert.rejects(
      client.responses.cancel(stored.id),
      (error: unknown) => error instanceof OpenAI.BadRequestError && /background/.test(error.message),
    );
  });

  it('responses e2e - input_tokens counts with the real tokenizer', async () => {
    const counted = (await (
      await postJson(`${stack.baseUrl}/v1/responses/input_tokens`, { model: 'cortex-chat', input: 'Say hello.' })
    ).json()) as { object: string; input_tokens: number };
    const created = await client.responses.create({ model: 'cortex-chat', input: 'Say hello.' });
    assert.equal(counted.object, 'response.input_tokens');
    assert.equal(counted.input_tokens, created.usage?.input_tokens);
  });

  it('responses e2e - a conversation accumulates its turns', async () => {
    const conversation = `conv_e2e_${Date.now()}`;
    const first = await client.responses.create({ model: 'cortex-chat', input: 'Hello there.', conversation });
    const second = await client.responses.create({ model: 'cortex-chat', input: 'And again.', conversation });
    assert.equal(second.output_text, chat.expected.text);
    assert.ok(
      (second.usage?.input_tokens ?? 0) > (first.usage?.input_tokens ?? 0) + 10,
      'the second turn carries the first',
    );
  });

  it('responses e2e - a previous_response_id chain stores each turn once and rebuilds the whole history', async () => {
    const responses = await new Kvm(stack.nc).open('cortex_responses');
    const ids: string[] = [];
    const inputTokens: number[] = [];
    for (let turn = 0; turn < 5; turn++) {
      const response = await client.responses.create({
        model: 'cortex-chat',
        input: `Turn ${turn}, marker${turn}.`,
        ...(turn > 0 && { previous_response_id: ids.at(-1) }),
      });
      ids.push(response.id);
      inputTokens.push(response.usage?.input_tokens ?? 0);
    }
    for (let turn = 1; turn < 5; turn++) {
      assert.ok(
        (inputTokens[turn] ?? 0) > (inputTokens[turn - 1] ?? 0) + 10,
        `turn ${turn} carries every turn before it: ${inputTokens.join(', ')}`,
      );
    }
    const last = (await responses.get(ids[4] as string))?.json<Record<string, unknown>>();
    assert.ok(last);
    assert.deepEqual(last.chain, ids.slice(0, 4), 'the chain is stored as ids');
    assert.equal(last.history, undefined);
    assert.ok(!JSON.stringify(last).includes('marker0'), 'the first turn is stored once, with its own response');

    // A follow-up across the chain is the same request whichever turn is asked about.
    const again = await client.responses.create({
      model: 'cortex-chat',
      input: 'Once more.',
      previous_response_id: ids[4],
    });
    assert.ok((again.usage?.input_tokens ?? 0) > (inputTokens[4] ?? 0));

    // A deleted turn in the middle breaks the chain, and the error names it.
    await client.responses.delete(ids[1] as string);
    await assert.rejects(
      client.responses.create({ model: 'cortex-chat', input: 'And now?', previous_response_id: ids[4] }),
      (error: unknown) => {
        assert.ok(error instanceof OpenAI.NotFoundError, String(error));
        assert.equal(error.param, 'previous_response_id');
        assert.match(error.message, new RegExp(`${ids[1]}.*no longer stored`));
        return true;
      },
    );
  });

  it('responses e2e - item references resolve from stored responses, in the chain or not', async () => {
    const other = await client.responses.create({ model: 'cortex-chat', input: 'A turn to refer to later.' });
    const first = await client.responses.create({ model: 'cortex-chat', input: 'Hello.' });
    const answer = first.output.find((item) => item.type === 'message');
    assert.ok(answer?.id && other.output[0]?.id);
    const plain = await client.responses.create({
      model: 'cortex-chat',
      input: 'Go on.',
      previous_response_id: first.id,
    });
    const referring = await client.responses.create({
      model: 'cortex-chat',
      previous_response_id: first.id,
      input: [
        { type: 'item_reference', id: answer.id },
        { type: 'item_reference', id: other.output[0].id },
        { role: 'user', content: 'Go on.' },
      ],
    });
    assert.ok(
      (referring.usage?.input_tokens ?? 0) > (plain.usage?.input_tokens ?? 0) + 10,
      'both referenced answers are part of the prompt',
    );
    await assert.rejects(
      client.responses.create({ model: 'cortex-chat', input: [{ type: 'item_reference', id: 'msg_0f0f0f_0' }] }),
      (error: unknown) => error instanceof OpenAI.BadRequestError && error.param === 'input[0].id',
    );
  });

  it('responses e2e - a chain that starts in a conversation keeps the conversation before it', async () => {
    const conversation = `conv_chain_${Date.now()}`;
    await client.responses.create({ model: 'cortex-chat', input: 'The first turn of the conversation.', conversation });
    const second = await client.responses.create({ model: 'cortex-chat', input: 'The second turn.', conversation });
    const alone = await client.responses.create({ model: 'cortex-chat', input: 'The second turn.' });
    const next = await client.responses.create({
      model: 'cortex-chat',
      input: 'Go on.',
      previous_response_id: second.id,
    });
    assert.ok(
      (second.usage?.input_tokens ?? 0) > (alone.usage?.input_tokens ?? 0) + 10,
      'the second turn carries the first',
    );
    assert.ok(
      (next.usage?.input_tokens ?? 0) > (second.usage?.input_tokens ?? 0) + (second.usage?.output_tokens ?? 0),
      'the follow-up carries both turns of the conversation and the second answer',
    );
  });

  it('responses e2e - a response stored with its whole history (the earlier format) can still be continued', async () => {
    const responses = await new Kvm(stack.nc).open('cortex_responses');
    const first = await client.responses.create({ model: 'cortex-chat', input: 'Hello.' });
    const plain = await client.responses.create({
      model: 'cortex-chat',
      input: 'Go on.',
      previous_response_id: first.id,
    });
    const stored = (await responses.get(first.id))?.json<Record<string, unknown>>();
    assert.ok(stored);
    const history = [
      {
        type: 'message',
        role: 'user',
        content: [
          { type: 'input_text', text: 'An earlier turn kept whole by the earlier format of stored responses.' },
        ],
      },
    ];
    await responses.put(first.id, JSON.stringify({ resource: stored.resource, input: stored.input, history }));
    const legacy = await client.responses.create({
      model: 'cortex-chat',
      input: 'Go on.',
      previous_response_id: first.id,
    });
    assert.ok(
      (legacy.usage?.input_tokens ?? 0) > (plain.usage?.input_tokens ?? 0) + 10,
      'the stored history is part of the prompt',
    );
  });

  it('responses e2e - a conversation continues across a restart of the gateway and translator', async () => {
    const first = await client.responses.create({ model: 'cortex-chat', input: 'Remember this.' });
    for (const name of ['gateway', 'translator']) {
      const child = stack.processes.get(name);
      assert.ok(child);
      const exited = new Promise((done) => child.once('exit', done));
      child.kill('SIGTERM');
      await exited;
      stack.processes.delete(name);
      stack.spawnService(name);
    }
    await waitFor(async () => (await fetch(`${stack.baseUrl}/readyz`).catch(() => null))?.ok === true, 30_000);
    await waitFor(async () => {
      const response = await fetch(`${stack.baseUrl}/v1/responses/${first.id}`).catch(() => null);
      return response?.status === 200;
    }, 30_000);
    const next = await client.responses.create({
      model: 'cortex-chat',
      input: 'What did I say?',
      previous_response_id: first.id,
    });
    assert.equal(next.output_text, chat.expected.text);
    assert.ok(
      (next.usage?.input_tokens ?? 0) > (first.usage?.input_tokens ?? 0),
      'the earlier turn was rehydrated from the store',
    );
  });
});
