import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { ResponsesWS } from 'openai/resources/responses/ws';
import Anthropic from '@anthropic-ai/sdk';
import { FAMILY_FIXTURES, familyTemplate, fixtureModel, type FamilyAnswer, type FamilyFixture } from '@cortex/fixtures';
import { startStack, waitFor, type TestStack } from '@cortex/testing';

/*
 * The models people run, each as a fixture carrying its family's real chat template and special
 * tokens and writing its family's raw output (libs/fixtures/src/family-fixtures.ts), through the
 * whole stack in every dialect, streamed and not: the answer and its reasoning split, a call with
 * its arguments (two where the family makes them), no marker text in the answer, and the answer
 * once the client sends the tool's result back — in each dialect's own way of sending it.
 */

interface Tool {
  name: string;
  description: string;
  parameters: Record<string, unknown>;
}
const weather: Tool = {
  name: 'get_weather',
  description: 'The weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};
const time: Tool = {
  name: 'get_time',
  description: 'The time in a time zone',
  parameters: { type: 'object', properties: { tz: { type: 'string' } }, required: ['tz'] },
};
const QUESTION = 'What is the weather in Paris?';
const RESULT = '{"temp": 20, "sky": "sunny"}';
/** Text no answer may hold: the markers of every family. */
const MARKUP =
  /<\|(channel|message|start|end|call|tool_call|im_start|im_end)|<\/?(think|tool_call|arg_key|arg_value|minimax:tool_call|TOOLCALL)>|\[TOOL_CALLS\]|\[ARGS\]|\[CALL_ID\]|｜tool|<\|tool_call|<tool_call\||<\|"\|>|<channel\|>|<\|channel>/;

interface Reply {
  content: string;
  reasoning: string;
  calls: Array<{ id: string; name: string; arguments: unknown }>;
  finish: string;
  /** What a follow-up needs to continue this reply (the Responses id). */
  responseId?: string;
}

type Dialect = 'chat' | 'responses' | 'responses-ws' | 'messages';
const DIALECTS: readonly Dialect[] = ['chat', 'responses', 'responses-ws', 'messages'];

function assertReply(reply: Reply, expected: FamilyAnswer, what: string): void {
  const shown = `${what}: ${JSON.stringify(reply)}`;
  assert.equal(reply.content.trim(), expected.content, shown);
  assert.doesNotMatch(reply.content, MARKUP, `${shown}: no marker text in the answer`);
  assert.doesNotMatch(reply.reasoning, MARKUP, `${shown}: no marker text in the reasoning`);
  if (expected.reasoning !== undefined) assert.equal(reply.reasoning.trim(), expected.reasoning, shown);
  const calls = expected.toolCalls ?? [];
  assert.deepEqual(
    reply.calls.map((call) => ({ name: call.name, arguments: call.arguments })),
    calls.map((call) => ({ name: call.name, arguments: call.arguments })),
    shown,
  );
  assert.equal(reply.finish, calls.length > 0 ? 'calls' : 'answer', shown);
}

describe('model families e2e', () => {
  let stack: TestStack;
  let openai: OpenAI;
  let anthropic: Anthropic;

  before(async () => {
    const models = [
      ...FAMILY_FIXTURES.map((fixture) => ({
        id: fixture.id,
        file: `fixture:${fixture.id}`,
        context_size: 8192,
        slots: 1,
      })),
      // The catalogue's own template and format, over the GGUF's (a ChatML fixture given Qwen3's template; one told it writes Llama's calls).
      {
        id: 'qwen3-templated',
        file: 'fixture:cortex-chat',
        context_size: 4096,
        slots: 1,
        chat_template: familyTemplate('Qwen-Qwen3-0.6B.jinja'),
      },
      { id: 'named-format', file: 'fixture:cortex-chat', context_size: 4096, slots: 1, format: 'llama3' },
      // Told it writes no calls at all: a forced call cannot be held to anything.
      { id: 'plain-format', file: 'fixture:cortex-chat', context_size: 4096, slots: 1, format: 'plain' },
      // Never asked for here: what /v1/models says of it comes from the catalogue and its header alone.
      {
        id: 'cortex-vision',
        file: 'fixture:cortex-vision',
        mmproj: 'fixture:mmproj-cortex-vision',
        context_size: 512,
        slots: 1,
      },
    ];
    stack = await startStack({ models });
    openai = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    anthropic = new Anthropic({ baseURL: stack.baseUrl, apiKey: 'unused', maxRetries: 0 });
  });

  after(async () => {
    await stack?.stop();
  });

  // Chat Completions -----------------------------------------------------------------------------

  async function chat(
    model: string,
    messages: OpenAI.ChatCompletionMessageParam[],
    tools: readonly Tool[],
    stream: boolean,
  ): Promise<Reply> {
    const body = {
      model,
      messages,
      ...(tools.length > 0 && { tools: tools.map((tool) => ({ type: 'function' as const, function: tool })) }),
    };
    const completion = stream
      ? await openai.chat.completions.stream(body).finalChatCompletion()
      : await openai.chat.completions.create(body);
    const choice = completion.choices[0] ?? assert.fail('no choice');
    const message = choice.message as typeof choice.message & { reasoning_content?: string };
    return {
      content: message.content ?? '',
      reasoning: message.reasoning_content ?? '',
      calls: (message.tool_calls ?? []).map((call) =>
        call.type === 'function'
          ? { id: call.id, name: call.function.name, arguments: JSON.parse(call.function.arguments) as unknown }
          : assert.fail(call.type),
      ),
      finish:
        choice.finish_reason === 'tool_calls'
          ? 'calls'
          : choice.finish_reason === 'stop'
            ? 'answer'
            : choice.finish_reason,
    };
  }

  function chatFollowUp(reply: Reply): OpenAI.ChatCompletionMessageParam[] {
    return [
      { role: 'user', content: QUESTION },
      {
        role: 'assistant',
        content: reply.content || null,
        tool_calls: reply.calls.map((call) => ({
          id: call.id,
          type: 'function',
          function: { name: call.name, arguments: JSON.stringify(call.arguments) },
        })),
      },
      ...reply.calls.map((call) => ({ role: 'tool' as const, tool_call_id: call.id, content: RESULT })),
    ];
  }

  // Responses, over HTTP and over the WebSocket --------------------------------------------------

  function fromResponse(response: OpenAI.Responses.Response): Reply {
    let content = '';
    let reasoning = '';
    const calls: Reply['calls'] = [];
    for (const item of response.output) {
      if (item.type === 'message')
        for (const part of item.content) content += part.type === 'output_text' ? part.text : '';
      else if (item.type === 'reasoning') for (const part of item.content ?? []) reasoning += part.text;
      else if (item.type === 'function_call')
        calls.push({ id: item.call_id, name: item.name, arguments: JSON.parse(item.arguments) as unknown });
    }
    return {
      content,
      reasoning,
      calls,
      finish: calls.length > 0 ? 'calls' : response.status === 'completed' ? 'answer' : String(response.status),
      responseId: response.id,
    };
  }

  async function responses(body: Record<string, unknown>, stream: boolean): Promise<Reply> {
    const request = body as unknown as OpenAI.Responses.ResponseCreateParamsNonStreaming;
    return fromResponse(
      stream
        ? await openai.responses
            .stream(body as unknown as Parameters<typeof openai.responses.stream>[0])
            .finalResponse()
        : await openai.responses.create(request),
    );
  }

  async function responsesWs(body: Record<string, unknown>): Promise<Reply> {
    const ws = new ResponsesWS(openai);
    const events: Array<{ type: string; response?: OpenAI.Responses.Response }> = [];
    ws.on('event', (event) => void events.push(event as never));
    ws.on('error', () => undefined);
    try {
      ws.send({ type: 'response.create', ...body } as never);
      await waitFor(
        () =>
          events.some(
            (event) =>
              event.type === 'response.completed' || event.type === 'response.failed' || event.type === 'error',
          ),
        60_000,
        20,
      );
      const done = events.find((event) => event.type === 'response.completed');
      assert.ok(done?.response, `the turn completed: ${JSON.stringify(events.at(-1))}`);
      return fromResponse(done.response);
    } finally {
      ws.close({ code: 1000, reason: 'done' });
    }
  }

  // Anthropic Messages ----------------------------------------------------------------------------

  async function messages(
    model: string,
    turns: Anthropic.MessageParam[],
    tools: readonly Tool[],
    stream: boolean,
  ): Promise<Reply & { blocks: Anthropic.ContentBlock[] }> {
    // Thinking blocks come back when thinking is asked for, as Anthropic's API does.
    const body = {
      model,
      max_tokens: 2048,
      thinking: { type: 'enabled' as const, budget_tokens: 1024 },
      messages: turns,
      ...(tools.length > 0 && {
        tools: tools.map((tool) => ({
          name: tool.name,
          description: tool.description,
          input_schema: tool.parameters as Anthropic.Tool.InputSchema,
        })),
      }),
    };
    const message = stream
      ? await anthropic.messages.stream(body).finalMessage()
      : await anthropic.messages.create(body);
    let content = '';
    let reasoning = '';
    const calls: Reply['calls'] = [];
    for (const block of message.content) {
      if (block.type === 'text') content += block.text;
      else if (block.type === 'thinking') reasoning += block.thinking;
      else if (block.type === 'tool_use') calls.push({ id: block.id, name: block.name, arguments: block.input });
    }
    const finish =
      message.stop_reason === 'tool_use'
        ? 'calls'
        : message.stop_reason === 'end_turn'
          ? 'answer'
          : String(message.stop_reason);
    return { content, reasoning, calls, finish, blocks: message.content };
  }

  // One situation in one dialect ---------------------------------------------------------------

  /** Asks `fixture` in `dialect`: with `tools` declared, and after `previous` (a call) with its results sent back. */
  async function ask(
    dialect: Dialect,
    fixture: FamilyFixture,
    tools: readonly Tool[],
    stream: boolean,
    previous?: Reply & { blocks?: Anthropic.ContentBlock[] },
  ): Promise<Reply & { blocks?: Anthropic.ContentBlock[] }> {
    const model = fixture.id;
    switch (dialect) {
      case 'chat':
        return chat(model, previous ? chatFollowUp(previous) : [{ role: 'user', content: QUESTION }], tools, stream);
      case 'responses':
      case 'responses-ws': {
        const declared = tools.map((tool) => ({ type: 'function', ...tool, strict: false }));
        const body = previous
          ? {
              model,
              previous_response_id: previous.responseId,
              input: previous.calls.map((call) => ({ type: 'function_call_output', call_id: call.id, output: RESULT })),
              tools: declared,
            }
          : { model, input: QUESTION, ...(declared.length > 0 && { tools: declared }) };
        return dialect === 'responses' ? responses(body, stream) : responsesWs(body);
      }
      case 'messages': {
        const turns: Anthropic.MessageParam[] = [{ role: 'user', content: QUESTION }];
        if (previous) {
          turns.push({ role: 'assistant', content: previous.blocks as Anthropic.ContentBlockParam[] });
          turns.push({
            role: 'user',
            content: previous.calls.map((call) => ({
              type: 'tool_result' as const,
              tool_use_id: call.id,
              content: RESULT,
            })),
          });
        }
        return messages(model, turns, tools, stream);
      }
    }
  }

  /** What /v1/models said of each family fixture before anything loaded it: the next test's loads must agree. */
  const beforeAnyLoad = new Map<string, Record<string, unknown> | null>();

  it('families e2e - before any request /v1/models says what each model can do, from its GGUF header and the catalogue', async () => {
    type Listed = { id: string; loaded: boolean; gguf?: unknown; capabilities: Record<string, unknown> | null };
    let models: Listed[] = [];
    const ids = [...FAMILY_FIXTURES.map((fixture) => fixture.id), 'cortex-vision', 'qwen3-templated'];
    // The headers are read as the models enter the catalogue, once a worker is up.
    await waitFor(async () => {
      models = ((await (await fetch(`${stack.baseUrl}/v1/models`)).json()) as { data: Listed[] }).data;
      return ids.every((id) => models.find((model) => model.id === id)?.gguf !== undefined);
    }, 60_000);
    const listed = (id: string): Listed => models.find((model) => model.id === id) ?? assert.fail(id);
    for (const fixture of FAMILY_FIXTURES) {
      const model = listed(fixture.id);
      assert.equal(model.loaded, false, `${fixture.id}: nothing loaded it yet`);
      assert.equal(model.capabilities?.format, fixture.format, fixture.id);
      assert.equal(model.capabilities?.tools, true, `${fixture.id}: its format writes calls`);
      assert.equal(model.capabilities?.vision, false, fixture.id);
      beforeAnyLoad.set(fixture.id, model.capabilities);
    }
    const vision = listed('cortex-vision');
    assert.equal(vision.loaded, false);
    assert.equal(vision.capabilities?.vision, true, 'a projector in the catalogue: it takes images');
    // The catalogue's own template is read at load: until then what it makes of the model is not said.
    assert.equal(listed('qwen3-templated').capabilities?.format, undefined);
  });

  it("families e2e - /v1/models says which format each model got: its template's, or the catalogue's template or format", async () => {
    for (const id of ['qwen3-templated', 'named-format']) {
      const reply = await openai.chat.completions.create({
        model: id,
        messages: [{ role: 'user', content: QUESTION }],
      });
      assert.equal(reply.choices[0]?.message.content, fixtureModel('cortex-chat').expected.text, `${id} still answers`);
    }
    const models = (
      (await (await fetch(`${stack.baseUrl}/v1/models`)).json()) as {
        data: Array<{ id: string; capabilities?: { format?: string } }>;
      }
    ).data;
    const format = (id: string): string | undefined => models.find((model) => model.id === id)?.capabilities?.format;
    assert.equal(format('qwen3-templated'), 'hermes');
    assert.equal(format('named-format'), 'llama3');
    await Promise.all(
      FAMILY_FIXTURES.map((fixture) =>
        openai.chat.completions.create({ model: fixture.id, messages: [{ role: 'user', content: QUESTION }] }),
      ),
    );
    const after = (
      (await (await fetch(`${stack.baseUrl}/v1/models`)).json()) as {
        data: Array<{
          id: string;
          capabilities?: { format?: string; tools?: boolean; reasoning?: boolean; vision?: boolean };
        }>;
      }
    ).data;
    for (const fixture of FAMILY_FIXTURES) {
      const loaded = after.find((model) => model.id === fixture.id)?.capabilities;
      assert.equal(loaded?.format, fixture.format, fixture.id);
      // What was said before the load is what the load found.
      const said = beforeAnyLoad.get(fixture.id);
      assert.deepEqual(
        { tools: loaded?.tools, reasoning: loaded?.reasoning, format: loaded?.format, vision: loaded?.vision },
        { tools: said?.tools, reasoning: said?.reasoning, format: said?.format, vision: said?.vision },
        `${fixture.id}: as said before its load`,
      );
    }
  });

  it("families e2e - Qwen3 told not to think, in each dialect's words, gets the template's empty thinking block in its prompt", async () => {
    const chatTokens = async (extra: Record<string, unknown>): Promise<number> => {
      const reply = await openai.chat.completions.create({
        model: 'cortex-qwen3',
        messages: [{ role: 'user', content: QUESTION }],
        ...extra,
      } as never);
      return (reply as OpenAI.ChatCompletion).usage?.prompt_tokens ?? 0;
    };
    const thinking = await chatTokens({});
    // `<think>\n\n</think>\n\n` after the generation prompt: a few tokens more.
    assert.ok(
      (await chatTokens({ chat_template_kwargs: { enable_thinking: false } })) > thinking,
      'chat_template_kwargs',
    );
    // Anthropic's input_tokens leaves out what was read from the prompt cache.
    const messageTokens = async (thinkingParam: Record<string, unknown>): Promise<number> => {
      const { usage } = await anthropic.messages.create({
        model: 'cortex-qwen3',
        max_tokens: 256,
        messages: [{ role: 'user', content: QUESTION }],
        ...thinkingParam,
      } as never);
      return usage.input_tokens + (usage.cache_read_input_tokens ?? 0);
    };
    assert.ok(
      (await messageTokens({ thinking: { type: 'disabled' } })) > (await messageTokens({})),
      'Anthropic thinking disabled',
    );
  });

  it("families e2e - x-include-thinking puts the reasoning into the answer between the family's own markers", async () => {
    const inline = async (model: string): Promise<string> => {
      const response = await fetch(`${stack.baseUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-include-thinking': 'true' },
        body: JSON.stringify({ model, messages: [{ role: 'user', content: QUESTION }] }),
      });
      return (
        ((await response.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]?.message.content ??
        ''
      );
    };
    assert.equal(await inline('cortex-qwen3'), '<think>The user says hello.</think>Hello from Qwen3!');
    assert.equal(
      await inline('cortex-gpt-oss'),
      '<|channel|>analysis<|message|>The user says hello.<|end|>Hello from gpt-oss.',
    );
  });

  for (const fixture of FAMILY_FIXTURES) {
    it(`families e2e - ${fixture.family} (${fixture.format}): answer, call${fixture.expected.parallel ? ', two calls' : ''} and the answer after its result, in every dialect, streamed and not`, async () => {
      for (const dialect of DIALECTS) {
        for (const stream of dialect === 'responses-ws' ? [true] : [false, true]) {
          const what = `${fixture.id} ${dialect}${stream ? ' streamed' : ''}`;
          assertReply(await ask(dialect, fixture, [], stream), fixture.expected.answer, `${what} answer`);
          const call = await ask(dialect, fixture, [weather], stream);
          assertReply(call, fixture.expected.call, `${what} call`);
          if (fixture.expected.parallel)
            assertReply(
              await ask(dialect, fixture, [weather, time], stream),
              fixture.expected.parallel,
              `${what} two calls`,
            );
          assertReply(
            await ask(dialect, fixture, [weather], stream, call),
            fixture.expected.afterResult,
            `${what} after the result`,
          );
        }
      }
    });
  }

  // Forced calls ----------------------------------------------------------------------------------

  /** One forced call in `dialect`: `required`, or the named tool; the calls and how it finished, or the error. */
  async function forced(
    dialect: 'chat' | 'responses' | 'messages',
    model: string,
    named: boolean,
    stream: boolean,
  ): Promise<Reply> {
    switch (dialect) {
      case 'chat': {
        const body = {
          model,
          messages: [{ role: 'user' as const, content: QUESTION }],
          tools: [{ type: 'function' as const, function: weather }],
          tool_choice: named ? { type: 'function' as const, function: { name: weather.name } } : ('required' as const),
          parallel_tool_calls: false,
        };
        const completion = stream
          ? await openai.chat.completions.stream(body).finalChatCompletion()
          : await openai.chat.completions.create(body);
        const choice = completion.choices[0] ?? assert.fail('no choice');
        return {
          content: choice.message.content ?? '',
          reasoning: '',
          calls: (choice.message.tool_calls ?? []).map((call) =>
            call.type === 'function'
              ? { id: call.id, name: call.function.name, arguments: JSON.parse(call.function.arguments) as unknown }
              : assert.fail(call.type),
          ),
          finish: choice.finish_reason === 'tool_calls' ? 'calls' : String(choice.finish_reason),
        };
      }
      case 'responses':
        return responses(
          {
            model,
            input: QUESTION,
            tools: [{ type: 'function', ...weather, strict: true }],
            tool_choice: named ? { type: 'function', name: weather.name } : 'required',
            parallel_tool_calls: false,
          },
          stream,
        );
      case 'messages': {
        const body = {
          model,
          max_tokens: 1024,
          messages: [{ role: 'user' as const, content: QUESTION }],
          tools: [
            {
              name: weather.name,
              description: weather.description,
              input_schema: weather.parameters as Anthropic.Tool.InputSchema,
            },
          ],
          tool_choice: named
            ? { type: 'tool' as const, name: weather.name, disable_parallel_tool_use: true }
            : { type: 'any' as const, disable_parallel_tool_use: true },
        };
        const message = stream
          ? await anthropic.messages.stream(body).finalMessage()
          : await anthropic.messages.create(body);
        const calls: Reply['calls'] = [];
        for (const block of message.content)
          if (block.type === 'tool_use') calls.push({ id: block.id, name: block.name, arguments: block.input });
        return {
          content: '',
          reasoning: '',
          calls,
          finish: message.stop_reason === 'tool_use' ? 'calls' : String(message.stop_reason),
        };
      }
    }
  }

  /**
   * Families whose calls a grammar holds from their start (docs/compatibility.md), and whether the
   * fixture's own chain fits the call as cortex opens it (then the call is the fixture's, `Paris`;
   * otherwise the grammar alone makes it a call of the tool with a string for `city`).
   */
  const FORCED: ReadonlyArray<[id: string, fits: boolean]> = [
    ['cortex-devstral', true],
    ['cortex-mistral-small', true],
    ['cortex-kimi-k2', true],
    ['cortex-deepseek-v3.1', true],
    ['cortex-qwen3-coder', true],
    ['cortex-glm', true],
    ['cortex-deepseek-r1', true],
    ['cortex-minimax-m2', true],
    ['cortex-gemma4', true],
    ['cortex-lfm2', true],
    ['cortex-gpt-oss', false],
    ['cortex-qwen3', false],
    ['cortex-nemotron', false],
    ['cortex-llama3', false],
  ];

  for (const [id, fits] of FORCED)
    it(`families e2e - ${id}: tool_choice required and a named tool give one call of it, of its schema, in Chat, Responses and Messages, streamed and not`, async () => {
      for (const dialect of ['chat', 'responses', 'messages'] as const)
        for (const named of [false, true])
          for (const stream of [false, true]) {
            const what = `${dialect} ${named ? 'named' : 'required'}${stream ? ' streamed' : ''}`;
            const reply = await forced(dialect, id, named, stream);
            assert.equal(reply.finish, 'calls', `${what}: ${JSON.stringify(reply)}`);
            assert.equal(reply.calls.length, 1, `${what}: ${JSON.stringify(reply.calls)}`);
            const [call] = reply.calls;
            assert.equal(call?.name, 'get_weather', what);
            if (fits) assert.deepEqual(call?.arguments, { city: 'Paris' }, what);
            else {
              const args = call?.arguments as Record<string, unknown>;
              assert.deepEqual(Object.keys(args), ['city'], `${what}: ${JSON.stringify(args)}`);
              assert.equal(typeof args.city, 'string', what);
            }
          }
    });

  /** A tool the fixtures never call, of typed parameters only (what the grammar leaves a fixture to choose is bounded). */
  const forecast: Tool = {
    name: 'forecast',
    description: 'The forecast, some days ahead',
    parameters: {
      type: 'object',
      properties: {
        days: { type: 'integer' },
        metric: { type: 'boolean' },
        unit: { type: 'string', enum: ['C', 'F'] },
      },
      required: ['days', 'metric', 'unit'],
    },
  };

  for (const [id] of FORCED)
    it(`families e2e - ${id}: a named tool it would not call is called with arguments of their types, streamed and not`, async () => {
      for (const stream of [false, true]) {
        const body = {
          model: id,
          messages: [{ role: 'user' as const, content: QUESTION }],
          tools: [weather, forecast].map((tool) => ({ type: 'function' as const, function: tool })),
          tool_choice: { type: 'function' as const, function: { name: forecast.name } },
        };
        const completion = stream
          ? await openai.chat.completions.stream(body).finalChatCompletion()
          : await openai.chat.completions.create(body);
        const choice = completion.choices[0] ?? assert.fail('no choice');
        const what = `${id}${stream ? ' streamed' : ''}: ${JSON.stringify(choice.message)}`;
        assert.equal(choice.finish_reason, 'tool_calls', what);
        const [call, ...more] = choice.message.tool_calls ?? [];
        assert.equal(more.length, 0, what);
        assert.ok(call?.type === 'function' && call.function.name === 'forecast', what);
        const args = JSON.parse(call.function.arguments) as Record<string, unknown>;
        assert.ok(Number.isInteger(args.days), what);
        assert.equal(typeof args.metric, 'boolean', what);
        assert.ok(args.unit === 'C' || args.unit === 'F', what);
      }
    });

  it('families e2e - a format that writes no calls: a forced call is a 400 naming tool_choice, in each dialect', async () => {
    for (const dialect of ['chat', 'responses', 'messages'] as const)
      await assert.rejects(forced(dialect, 'plain-format', true, false), (error: unknown) => {
        const status = (error as { status?: number }).status;
        assert.equal(status, 400, `${dialect}: ${String(error)}`);
        assert.match(String((error as Error).message), /tool_choice/, dialect);
        return true;
      });
  });
});
