import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { Subjects, type StreamEvent } from '@cortex/contracts';
import { fixtureModel } from '@cortex/fixtures';
import {
  postJson,
  postSse,
  startStack,
  waitFor,
  watchBus,
  STORIES_260K,
  storiesAvailable,
  FIXTURE_CATALOGUE,
  type TestStack,
} from '@cortex/testing';

const chat = fixtureModel('cortex-chat');
const reasoning = fixtureModel('cortex-reasoning');
const tools = fixtureModel('cortex-tools');
const user = [{ role: 'user' as const, content: 'Say hello.' }];

describe('chat completions e2e', () => {
  let stack: TestStack;
  let client: OpenAI;

  before(async () => {
    const models: Array<Record<string, unknown>> = [...FIXTURE_CATALOGUE];
    if (storiesAvailable()) models.push({ id: 'stories260K', file: STORIES_260K, context_size: 1024, slots: 2 });
    stack = await startStack({ models });
    client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
  });

  after(async () => {
    await stack?.stop();
  });

  it('chat e2e - /v1/models lists the catalogue with where each model is loaded', async () => {
    const page = await client.models.list();
    const ids = page.data.map((m) => m.id);
    assert.deepEqual(ids.slice(0, 3), ['cortex-chat', 'cortex-reasoning', 'cortex-tools']);
    const entry = page.data.find((m) => m.id === 'cortex-chat') as unknown as {
      loaded: boolean;
      locations: Array<{ worker: string; state: string }>;
    };
    assert.equal(entry.loaded, true);
    assert.equal(entry.locations.length, 1);
    assert.equal(entry.locations[0]?.state, 'ready');
    assert.deepEqual((entry as unknown as { capabilities: unknown }).capabilities, {
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
    const cold = page.data.find((m) => m.id === 'stories260K') as unknown as { capabilities: unknown } | undefined;
    if (cold)
      assert.deepEqual(
        cold.capabilities,
        { chat: true, embeddings: false, rerank: false },
        'its kind only, until loaded',
      );
  });

  it('chat e2e - create returns the fixture sentence with exact usage', async () => {
    const { data, response } = await client.chat.completions
      .create({ model: 'cortex-chat', messages: user })
      .withResponse();
    assert.equal(response.status, 200);
    assert.match(response.headers.get('x-request-id') ?? '', /^req_[0-9a-f]{24}$/);
    assert.equal(data.object, 'chat.completion');
    assert.equal(data.choices[0]?.message.content, chat.expected.text);
    assert.equal(data.choices[0]?.finish_reason, 'stop');
    assert.equal(data.usage?.completion_tokens, chat.completionTokens);
    assert.ok((data.usage?.prompt_tokens ?? 0) > 0);
    assert.equal(data.usage?.total_tokens, (data.usage?.prompt_tokens ?? 0) + chat.completionTokens);
  });

  it('chat e2e - stream() delivers the sentence, usage last, and a final completion', async () => {
    const stream = client.chat.completions.stream({
      model: 'cortex-chat',
      messages: user,
      stream_options: { include_usage: true },
    });
    const deltas: string[] = [];
    stream.on('content', (delta) => deltas.push(delta));
    const final = await stream.finalChatCompletion();
    assert.equal(final.choices[0]?.message.content, chat.expected.text);
    assert.equal(deltas.join(''), chat.expected.text);
    assert.ok(deltas.length > 1, 'tokens arrive as several deltas, not one buffered body');
    assert.equal(final.choices[0]?.finish_reason, 'stop');
    assert.equal(final.usage?.completion_tokens, chat.completionTokens);
  });

  it('chat e2e - SSE framing: event-stream, one JSON per data line, role first, [DONE] last', async () => {
    const { status, headers, raw, messages } = await postSse(
      `${stack.baseUrl}/v1/chat/completions`,
      {
        model: 'cortex-chat',
        messages: user,
        stream: true,
        stream_options: { include_usage: true },
      },
      { 'x-request-id': 'my-request-1' },
    );
    assert.equal(status, 200);
    assert.match(headers.get('content-type') ?? '', /^text\/event-stream/);
    assert.equal(headers.get('x-request-id'), 'my-request-1');
    assert.ok(raw.endsWith('data: [DONE]\n\n'));
    assert.ok(!raw.includes('\r'));
    assert.equal(messages.at(-1)?.data, '[DONE]');
    const chunks = messages.slice(0, -1).map(
      (m) =>
        JSON.parse(m.data) as {
          choices: Array<{ delta: { role?: string; content?: string }; finish_reason: string | null }>;
          usage: unknown;
        },
    );
    assert.equal(chunks[0]?.choices[0]?.delta.role, 'assistant');
    assert.equal(chunks.map((c) => c.choices[0]?.delta.content ?? '').join(''), chat.expected.text);
    const usageChunk = chunks.at(-1);
    assert.deepEqual(usageChunk?.choices, []);
    assert.equal((usageChunk?.usage as { completion_tokens: number }).completion_tokens, chat.completionTokens);
    assert.equal(chunks.at(-2)?.choices[0]?.finish_reason, 'stop');
  });

  it('chat e2e - tokens cross the bus as numbered events on the stream subject', async () => {
    const events = await watchBus<StreamEvent>(stack.nc, Subjects.streamsAll);
    const seen = events.messages;
    const result = await client.chat.completions.create({ model: 'cortex-chat', messages: user });
    // The observer's copy of the last event may land just after the gateway answered.
    await waitFor(() => seen.at(-1)?.type === 'finish', 2_000);
    await events.stop();
    assert.equal(result.choices[0]?.message.content, chat.expected.text);
    assert.deepEqual(
      seen.map((e) => e.seq),
      seen.map((_, i) => i),
    );
    assert.equal(seen[0]?.type, 'start');
    assert.equal(seen.at(-1)?.type, 'finish');
    const text = seen.flatMap((e) => (e.type === 'text' ? [e.text] : [])).join('');
    assert.equal(text, chat.expected.text);
  });

  it('chat e2e - a reasoning model splits reasoning_content from content and counts it', async () => {
    const result = await client.chat.completions.create({ model: 'cortex-reasoning', messages: user });
    const message = result.choices[0]?.message as { content: string; reasoning_content?: string };
    assert.equal(message.content, reasoning.expected.text);
    assert.equal(message.reasoning_content, reasoning.expected.reasoning);
    assert.equal(result.usage?.completion_tokens, reasoning.completionTokens);
    assert.ok((result.usage?.completion_tokens_details?.reasoning_tokens ?? 0) > 0);
  });

  it('chat e2e - a tool-calling model returns tool_calls, streamed and not', async () => {
    const toolDefs = [
      {
        type: 'function' as const,
        function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
      },
    ];
    const result = await client.chat.completions.create({ model: 'cortex-tools', messages: user, tools: toolDefs });
    assert.equal(result.choices[0]?.finish_reason, 'tool_calls');
    const call = result.choices[0]?.message.tool_calls?.[0] as {
      id: string;
      function: { name: string; arguments: string };
    };
    assert.equal(call.function.name, tools.expected.toolCall?.name);
    assert.deepEqual(JSON.parse(call.function.arguments), tools.expected.toolCall?.arguments);
    assert.match(call.id, /^call_/);

    const final = await client.chat.completions
      .stream({ model: 'cortex-tools', messages: user, tools: toolDefs })
      .finalChatCompletion();
    assert.equal(final.choices[0]?.finish_reason, 'tool_calls');
    const streamed = final.choices[0]?.message.tool_calls?.[0] as { function: { name: string; arguments: string } };
    assert.equal(streamed.function.name, 'get_weather');
    assert.deepEqual(JSON.parse(streamed.function.arguments), tools.expected.toolCall?.arguments);
  });

  it('chat e2e - tool-call markup with no tools declared is text; with other tools declared the call is held to them', async () => {
    for (const declared of [undefined, []]) {
      const result = await client.chat.completions.create({
        model: 'cortex-tools',
        messages: user,
        ...(declared && { tools: declared }),
      });
      assert.equal(result.choices[0]?.finish_reason, 'stop', `tools: ${JSON.stringify(declared)}`);
      assert.equal(result.choices[0]?.message.tool_calls, undefined);
      assert.equal(result.choices[0]?.message.content, tools.expected.raw);
    }
    // The call grammar allows only the declared names: the fixture's get_weather becomes get_time.
    const other = [
      {
        type: 'function' as const,
        function: { name: 'get_time', parameters: { type: 'object', properties: {}, additionalProperties: false } },
      },
    ];
    const result = await client.chat.completions.create({ model: 'cortex-tools', messages: user, tools: other });
    assert.equal(result.choices[0]?.finish_reason, 'tool_calls');
    const call = result.choices[0]?.message.tool_calls?.[0] as { function: { name: string; arguments: string } };
    assert.deepEqual([call.function.name, JSON.parse(call.function.arguments)], ['get_time', {}]);
  });

  it('chat e2e - tool_choice required and a named function are enforced, not hoped for', async () => {
    const weather = {
      type: 'function' as const,
      function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
    };
    const time = {
      type: 'function' as const,
      function: { name: 'get_time', parameters: { type: 'object', properties: {} } },
    };
    // With the tool's result in context the model answers in text on its own ...
    const answered = [
      ...user,
      {
        role: 'assistant' as const,
        content: null,
        tool_calls: [
          { id: 'call_1', type: 'function' as const, function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
        ],
      },
      { role: 'tool' as const, tool_call_id: 'call_1', content: '{"temp_c": 21}' },
    ];
    const free = await client.chat.completions.create({ model: 'cortex-tools', messages: answered, tools: [weather] });
    assert.equal(free.choices[0]?.message.content, tools.expected.afterToolResult?.text);
    // ... but 'required' makes it call a tool, streamed through the SDK's helper too.
    const required = await client.chat.completions
      .stream({ model: 'cortex-tools', messages: answered, tools: [weather], tool_choice: 'required' })
      .finalChatCompletion();
    assert.equal(required.choices[0]?.finish_reason, 'tool_calls');
    const call = required.choices[0]?.message.tool_calls?.[0] as { function: { name: string; arguments: string } };
    assert.equal(call.function.name, 'get_weather');
    assert.equal(typeof (JSON.parse(call.function.arguments) as { city: unknown }).city, 'string');
    // A named function wins over the one the model would pick, with arguments of its schema.
    const named = await client.chat.completions.create({
      model: 'cortex-tools',
      messages: user,
      tools: [weather, time],
      tool_choice: { type: 'function', function: { name: 'get_time' } },
    });
    assert.equal(named.choices[0]?.finish_reason, 'tool_calls');
    const namedCall = named.choices[0]?.message.tool_calls?.[0] as { function: { name: string; arguments: string } };
    assert.equal(namedCall.function.name, 'get_time');
    assert.deepEqual(JSON.parse(namedCall.function.arguments), {});
  });

  it(
    'chat e2e - tool_choice required on a model that writes no parseable tool calls is a 400 naming it',
    { skip: !storiesAvailable() && 'no ../shared/models' },
    async () => {
      const weather = {
        type: 'function' as const,
        function: { name: 'get_weather', parameters: { type: 'object', properties: {} } },
      };
      await assert.rejects(
        client.chat.completions.create({
          model: 'stories260K',
          messages: user,
          tools: [weather],
          tool_choice: 'required',
        }),
        (error: unknown) => {
          assert.ok(error instanceof OpenAI.BadRequestError);
          assert.equal((error.error as { param?: string }).param, 'tool_choice');
          assert.match(error.message, /cannot be enforced: stories260K writes no tool calls/);
          return true;
        },
      );
    },
  );

  it('chat e2e - unknown model is a 404 in OpenAI shape', async () => {
    await assert.rejects(
      client.chat.completions.create({ model: 'no-such-model', messages: user }),
      (error: unknown) => {
        assert.ok(error instanceof OpenAI.NotFoundError);
        assert.equal(error.status, 404);
        assert.equal(error.code, 'model_not_found');
        assert.match(error.message, /no-such-model/);
        return true;
      },
    );
  });

  it('chat e2e - an invalid body is a 400 naming the field', async () => {
    await assert.rejects(
      client.chat.completions.create({ model: 'cortex-chat', messages: [{ role: 'robot', content: 'x' }] as never }),
      (error: unknown) => {
        assert.ok(error instanceof OpenAI.BadRequestError);
        assert.equal(error.param, 'messages[0].role');
        return true;
      },
    );
    const response = await postJson(`${stack.baseUrl}/v1/chat/completions`, '{"model":');
    assert.equal(response.status, 400);
    const body = (await response.json()) as { error: { type: string; message: string } };
    assert.equal(body.error.type, 'invalid_request_error');
  });

  it(
    'chat e2e - stories260K loads on demand and decodes deterministically at temperature 0',
    { skip: !storiesAvailable() && 'no ../shared/models' },
    async () => {
      const ask = () =>
        client.chat.completions.create({
          model: 'stories260K',
          messages: [{ role: 'user', content: 'Once upon a time' }],
          temperature: 0,
          max_tokens: 24,
        });
      const first = await ask();
      const second = await ask();
      assert.equal(first.choices[0]?.finish_reason, 'length');
      assert.equal(first.usage?.completion_tokens, 24);
      assert.ok((first.choices[0]?.message.content ?? '').length > 10);
      assert.equal(second.choices[0]?.message.content, first.choices[0]?.message.content);
      assert.ok(
        (second.usage?.prompt_tokens_details?.cached_tokens ?? 0) > 0,
        'the second run reuses the cached prompt prefix',
      );
      // A real model without reasoning or tool-call marker tokens says so in the catalogue once loaded.
      const entry = (await client.models.retrieve('stories260K')) as unknown as { capabilities: unknown };
      assert.deepEqual(entry.capabilities, {
        chat: true,
        embeddings: false,
        rerank: false,
        tools: false,
        reasoning: false,
        format: 'plain',
        vision: false,
        completions: true,
        fim: false,
      });
    },
  );

  it(
    'chat e2e - response_format json_schema is enforced by a grammar',
    { skip: !storiesAvailable() && 'no ../shared/models' },
    async () => {
      const schema = {
        type: 'object',
        properties: { answer: { type: 'string', enum: ['yes', 'no'] }, count: { type: 'integer' } },
        required: ['answer', 'count'],
      };
      const result = await client.chat.completions.create({
        model: 'stories260K',
        messages: [{ role: 'user', content: 'Once upon a time' }],
        max_tokens: 200,
        temperature: 0,
        response_format: { type: 'json_schema', json_schema: { name: 'reply', schema } },
      });
      const parsed = JSON.parse(result.choices[0]?.message.content ?? '') as { answer: string; count: number };
      assert.ok(['yes', 'no'].includes(parsed.answer));
      assert.ok(Number.isInteger(parsed.count));
      assert.equal(result.choices[0]?.finish_reason, 'stop');

      const object = await client.chat.completions.create({
        model: 'stories260K',
        messages: [{ role: 'user', content: 'Once upon a time' }],
        max_tokens: 300,
        temperature: 0,
        response_format: { type: 'json_object' },
      });
      if (object.choices[0]?.finish_reason === 'stop') JSON.parse(object.choices[0]?.message.content ?? '');
      assert.match(object.choices[0]?.message.content ?? '', /^\s*[{[]/);
    },
  );

  it(
    'chat e2e - a client that disconnects cancels generation in the worker',
    { skip: !storiesAvailable() && 'no ../shared/models' },
    async () => {
      const events = await watchBus<StreamEvent>(stack.nc, Subjects.streamsAll);
      const finishes = () =>
        events.messages.filter((e): e is Extract<StreamEvent, { type: 'finish' }> => e.type === 'finish');
      const controller = new AbortController();
      const stream = await client.chat.completions.create(
        {
          model: 'stories260K',
          messages: [{ role: 'user', content: 'Once upon a time' }],
          stream: true,
          max_tokens: 900,
          temperature: 0.9,
        },
        { signal: controller.signal },
      );
      let received = 0;
      for await (const _chunk of stream) {
        if (++received === 3) {
          controller.abort();
          break;
        }
      }
      assert.equal(received, 3);
      await waitFor(() => finishes().length > 0, 5_000);
      await events.stop();
      assert.equal(finishes()[0]?.reason, 'cancelled');
      assert.ok((finishes()[0]?.usage.completionTokens ?? 900) < 900, 'generation stopped early');
    },
  );
});

describe('chat completions e2e without workers', () => {
  let stack: TestStack;

  before(async () => {
    stack = await startStack({
      services: ['router', 'translator', 'gateway'],
      models: [{ id: 'cortex-chat', file: 'fixture:cortex-chat' }],
      config: { gateway: { worker_wait_ms: 500 } },
    });
  });

  after(async () => {
    await stack?.stop();
  });

  it('chat e2e - no worker (after gateway.worker_wait_ms) is a 503 with Retry-After', async () => {
    const response = await postJson(`${stack.baseUrl}/v1/chat/completions`, { model: 'cortex-chat', messages: user });
    assert.equal(response.status, 503);
    assert.ok(Number(response.headers.get('retry-after')) > 0);
    const body = (await response.json()) as { error: { code: string; message: string } };
    assert.equal(body.error.code, 'no_worker');
    assert.match(body.error.message, /cortex serve worker/);
  });
});
