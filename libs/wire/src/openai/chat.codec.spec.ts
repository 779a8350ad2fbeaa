import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError, type StreamEvent } from '@cortex/contracts';
import { decodeChatRequest } from './chat.decoder.js';
import {
  ChatChoicesAggregator,
  ChatChoicesEncoder,
  ChatChunkEncoder,
  ChatCompletionAggregator,
  openAiError,
} from './chat.encoder.js';

function invalid(body: unknown, param: string): void {
  assert.throws(
    () => decodeChatRequest(body),
    (error: Error) => error instanceof CortexError && error.code === 'invalid_request' && error.extra.param === param,
    `expected invalid_request on ${param}`,
  );
}

const usage = { promptTokens: 5, cachedPromptTokens: 1, completionTokens: 3, reasoningTokens: 1 };
const timings = { ttftMs: 1, promptMs: 1, decodeTokensPerSecond: 100, durationMs: 10, queueMs: 0 };

describe('openai chat codec', () => {
  it('openai chat codec - decodes roles, sampling, tools and a tool round trip', () => {
    const request = decodeChatRequest({
      model: 'm',
      messages: [
        { role: 'developer', content: 'be brief' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'weather ' },
            { type: 'text', text: 'in Paris?' },
          ],
        },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c1', type: 'function', function: { name: 'w', arguments: '{"city":"Paris"}' } }],
        },
        { role: 'tool', tool_call_id: 'c1', content: '{"temp":20}' },
      ],
      tools: [{ type: 'function', function: { name: 'w', parameters: { type: 'object' } } }],
      tool_choice: { type: 'function', function: { name: 'w' } },
      temperature: 0,
      max_completion_tokens: 7,
      stop: 'END',
      stream: true,
      stream_options: { include_usage: true },
    });
    assert.deepEqual(
      request.messages.map((m) => m.role),
      ['system', 'user', 'assistant', 'tool'],
    );
    assert.equal(request.messages[1]?.content, 'weather in Paris?');
    assert.deepEqual(request.messages[2]?.toolCalls, [{ id: 'c1', name: 'w', arguments: '{"city":"Paris"}' }]);
    assert.equal(request.messages[3]?.toolCallId, 'c1');
    assert.deepEqual(request.sampling, { temperature: 0, maxTokens: 7, stop: ['END'] });
    assert.equal(request.toolChoice, 'function:w');
    assert.equal(request.includeUsage, true);
  });

  it('openai chat codec - a strict function is strict; others are not', () => {
    const tool = (strict?: unknown) => ({
      type: 'function',
      function: { name: 'w', parameters: { type: 'object' }, ...(strict !== undefined && { strict }) },
    });
    const body = { model: 'm', messages: [{ role: 'user', content: 'hi' }], tools: [tool(true), tool(false), tool()] };
    assert.deepEqual(
      decodeChatRequest(body).tools?.map((t) => t.strict),
      [true, undefined, undefined],
    );
    invalid({ ...body, tools: [tool('yes')] }, 'tools[0].function.strict');
  });

  it("openai chat codec - chat_template_kwargs and reasoning_effort reach the model's chat template; its own inputs cannot be set", () => {
    const base = { model: 'm', messages: [{ role: 'user', content: 'hi' }] };
    assert.equal(decodeChatRequest(base).templateOptions, undefined);
    assert.deepEqual(
      decodeChatRequest({ ...base, chat_template_kwargs: { enable_thinking: false }, reasoning_effort: 'high' })
        .templateOptions,
      { reasoning_effort: 'high', enable_thinking: false },
    );
    const refused = (body: Record<string, unknown>): string => {
      try {
        decodeChatRequest({ ...base, ...body });
      } catch (error) {
        return (error as CortexError).message;
      }
      return assert.fail('accepted');
    };
    assert.match(
      refused({ chat_template_kwargs: { messages: [] } }),
      /chat_template_kwargs\.messages: is the chat template's own input/,
    );
    assert.match(refused({ chat_template_kwargs: { 'bad key': 1 } }), /chat_template_kwargs\.bad key: must be a name/);
    assert.match(refused({ chat_template_kwargs: 'x' }), /chat_template_kwargs: must be an object/);
    assert.match(refused({ reasoning_effort: 'extreme' }), /reasoning_effort/);
  });

  it('openai chat codec - parallel_tool_calls false allows one tool call', () => {
    const body = {
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      tools: [{ type: 'function', function: { name: 'w' } }],
    };
    assert.equal(decodeChatRequest({ ...body, parallel_tool_calls: false }).maxToolCalls, 1);
    assert.equal(decodeChatRequest({ ...body, parallel_tool_calls: true }).maxToolCalls, undefined);
  });

  it("openai chat codec - continue_final_message goes on from the last assistant message (vLLM's extension)", () => {
    const messages = [
      { role: 'user', content: 'Sing.' },
      { role: 'assistant', content: 'Round and round ' },
    ];
    const request = decodeChatRequest({
      model: 'm',
      messages,
      continue_final_message: true,
      add_generation_prompt: false,
    });
    assert.deepEqual(request.messages, [{ role: 'user', content: 'Sing.' }]);
    assert.equal(request.prefill, 'Round and round ');
    // Without it, a last assistant message is a turn of the conversation, as at OpenAI.
    assert.equal(decodeChatRequest({ model: 'm', messages }).prefill, undefined);
    invalid(
      { model: 'm', messages, continue_final_message: true, add_generation_prompt: true },
      'add_generation_prompt',
    );
    invalid({ model: 'm', messages: messages.slice(0, 1), continue_final_message: true }, 'continue_final_message');
  });

  it('openai chat codec - tool_choice none drops the tools', () => {
    const request = decodeChatRequest({
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      tools: [{ type: 'function', function: { name: 'w' } }],
      tool_choice: 'none',
    });
    assert.equal(request.tools, undefined);
  });

  it('openai chat codec - invalid bodies name the field', () => {
    invalid({ messages: [] }, 'model');
    invalid({ model: 'm', messages: [] }, 'messages');
    invalid({ model: 'm', messages: [{ role: 'robot', content: 'x' }] }, 'messages[0].role');
    invalid({ model: 'm', messages: [{ role: 'user', content: 5 }] }, 'messages[0].content');
    invalid(
      { model: 'm', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] },
      'messages[0].content[0]',
    );
    invalid({ model: 'm', messages: [{ role: 'tool', content: 'x' }] }, 'messages[0].tool_call_id');
    // A tool result answers a call made before it: none at all, or another id, is refused.
    invalid(
      {
        model: 'm',
        messages: [
          { role: 'user', content: 'x' },
          { role: 'tool', tool_call_id: 'c9', content: 'x' },
        ],
      },
      'messages[1].tool_call_id',
    );
    invalid(
      {
        model: 'm',
        messages: [
          {
            role: 'assistant',
            content: null,
            tool_calls: [{ id: 'c1', type: 'function', function: { name: 'w', arguments: '{}' } }],
          },
          { role: 'tool', tool_call_id: 'c2', content: 'x' },
        ],
      },
      'messages[1].tool_call_id',
    );
    invalid({ model: 'm', messages: [{ role: 'user', content: 'x' }], temperature: 3 }, 'temperature');
    invalid({ model: 'm', messages: [{ role: 'user', content: 'x' }], max_tokens: 0 }, 'max_tokens');
    invalid({ model: 'm', messages: [{ role: 'user', content: 'x' }], n: 2 }, 'n');
    invalid({ model: 'm', messages: [{ role: 'user', content: 'x' }], n: 17 }, 'n');
    invalid(
      { model: 'm', messages: [{ role: 'user', content: 'x' }], stream_options: { include_usage: true } },
      'stream_options',
    );
    invalid(
      {
        model: 'm',
        messages: [{ role: 'user', content: 'x' }],
        tool_choice: { type: 'function', function: { name: 'nope' } },
      },
      'tool_choice.function.name',
    );
  });

  it('openai chat codec - a JSON schema that is not an object or does not compile is a 400 naming it', () => {
    const body = { model: 'm', messages: [{ role: 'user', content: 'x' }] };
    const format = (schema: unknown) => ({
      ...body,
      response_format: { type: 'json_schema', json_schema: { name: 'r', schema } },
    });
    invalid(format('a string'), 'response_format.json_schema.schema');
    invalid(format([{ type: 'object' }]), 'response_format.json_schema.schema');
    invalid(format({ type: 'objekt' }), 'response_format.json_schema.schema');
    invalid(
      format({ type: 'object', properties: { a: { $ref: '#/$defs/missing' } } }),
      'response_format.json_schema.schema',
    );
    const tool = (parameters: unknown) => ({
      ...body,
      tools: [{ type: 'function', function: { name: 'f', parameters } }],
    });
    invalid(tool(7), 'tools[0].function.parameters');
    invalid(tool({ type: 'object', required: 'a' }), 'tools[0].function.parameters');
    // A draft 2020-12 schema (zod) and a draft-07 one (older tools) both compile; no schema still asks for JSON.
    const zod = {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      properties: { n: { type: 'integer' } },
      required: ['n'],
      additionalProperties: false,
    };
    assert.deepEqual(decodeChatRequest(format(zod)).responseFormat, { type: 'json_schema', schema: zod });
    const draft7 = {
      $schema: 'http://json-schema.org/draft-07/schema#',
      definitions: { n: { type: 'number' } },
      type: 'object',
      properties: { n: { $ref: '#/definitions/n' } },
    };
    assert.deepEqual(decodeChatRequest(tool(draft7)).tools?.[0]?.parameters, draft7);
    assert.deepEqual(
      decodeChatRequest({ ...body, response_format: { type: 'json_schema', json_schema: { name: 'r' } } })
        .responseFormat,
      { type: 'json_object' },
    );
  });

  it('openai chat codec - stream chunks put the role first and usage last', () => {
    const encoder = new ChatChunkEncoder({ id: 'chatcmpl-1', model: 'm', created: 1, includeUsage: true });
    const events: StreamEvent[] = [
      { seq: 0, type: 'start', runId: 'r', workerId: 'w', model: 'm', promptTokens: 5 },
      { seq: 1, type: 'reasoning', text: 'hmm' },
      { seq: 2, type: 'keepalive' },
      { seq: 3, type: 'text', text: 'Hi' },
      { seq: 4, type: 'finish', reason: 'stop', usage, timings },
    ];
    const chunks = events.flatMap((event) => encoder.encode(event)) as Array<{
      choices: Array<{ delta: unknown; finish_reason: unknown }>;
      usage: unknown;
    }>;
    assert.equal(chunks.length, 4);
    assert.deepEqual(chunks[0]?.choices[0]?.delta, { role: 'assistant', content: '', reasoning_content: 'hmm' });
    assert.deepEqual(chunks[1]?.choices[0]?.delta, { content: 'Hi' });
    assert.equal(chunks[2]?.choices[0]?.finish_reason, 'stop');
    assert.equal(chunks[2]?.usage, null);
    assert.deepEqual(chunks[3]?.choices, []);
    assert.deepEqual(chunks[3]?.usage, {
      prompt_tokens: 5,
      completion_tokens: 3,
      total_tokens: 8,
      prompt_tokens_details: { cached_tokens: 1 },
      completion_tokens_details: { reasoning_tokens: 1 },
    });
  });

  it('openai chat codec - tool calls stream with integer index, id and argument chunks', () => {
    const encoder = new ChatChunkEncoder({ id: 'c', model: 'm', created: 1, includeUsage: false });
    const aggregator = new ChatCompletionAggregator({ id: 'c', model: 'm', created: 1 });
    const events: StreamEvent[] = [
      { seq: 0, type: 'tool_call', index: 0, id: 'call_1', name: 'get_weather' },
      { seq: 1, type: 'tool_args', index: 0, delta: '{"city":' },
      { seq: 2, type: 'tool_args', index: 0, delta: '"Paris"}' },
      { seq: 3, type: 'finish', reason: 'tool_calls', usage, timings },
    ];
    const chunks = events.flatMap((event) => {
      aggregator.add(event);
      return encoder.encode(event);
    }) as Array<{ choices: Array<{ delta: { tool_calls?: unknown[] }; finish_reason: unknown }> }>;
    assert.deepEqual(chunks[0]?.choices[0]?.delta.tool_calls, [
      { index: 0, id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '' } },
    ]);
    assert.equal(chunks[3]?.choices[0]?.finish_reason, 'tool_calls');
    const body = aggregator.body() as { choices: Array<{ message: Record<string, unknown>; finish_reason: string }> };
    assert.deepEqual(body.choices[0]?.message.tool_calls, [
      { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
    ]);
    assert.equal(body.choices[0]?.message.content, null);
  });

  /** Events through an x-include-thinking encoder and aggregator: the chunks streamed and the body. */
  function inlined(events: StreamEvent[]): {
    content: string;
    chunks: Array<{ choices: Array<{ delta: { content?: string; reasoning_content?: string } }> }>;
    message: Record<string, unknown> | undefined;
  } {
    const options = { id: 'c', model: 'm', created: 1, includeUsage: false, inlineReasoning: true };
    const encoder = new ChatChunkEncoder(options);
    const aggregator = new ChatCompletionAggregator(options);
    const chunks = events.flatMap((event) => {
      aggregator.add(event);
      return encoder.encode(event);
    }) as Array<{ choices: Array<{ delta: { content?: string; reasoning_content?: string } }> }>;
    const content = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
    return {
      content,
      chunks,
      message: (aggregator.body() as { choices: Array<{ message: Record<string, unknown> }> }).choices[0]?.message,
    };
  }

  it('openai chat codec - x-include-thinking inlines reasoning as <think> content, streamed and not', () => {
    const { content, chunks, message } = inlined([
      { seq: 0, type: 'reasoning', text: 'hmm ' },
      { seq: 1, type: 'reasoning', text: 'ok' },
      { seq: 2, type: 'text', text: 'Hi' },
      { seq: 3, type: 'reasoning', text: 'and more' },
      { seq: 4, type: 'text', text: '!' },
      { seq: 5, type: 'finish', reason: 'stop', usage, timings },
    ]);
    assert.equal(content, '<think>hmm ok</think>Hi<think>and more</think>!');
    assert.ok(chunks.every((c) => c.choices[0]?.delta.reasoning_content === undefined));
    assert.equal(message?.content, '<think>hmm ok</think>Hi<think>and more</think>!', 'the body reads like the stream');
    assert.equal(message?.reasoning_content, undefined);
  });

  it("openai chat codec - x-include-thinking wraps reasoning in the model's own markers when its start event names them", () => {
    const { content, message } = inlined([
      {
        seq: 0,
        type: 'start',
        runId: 'r',
        workerId: 'w',
        model: 'm',
        promptTokens: 3,
        reasoningMarkers: ['[THINK]', '[/THINK]'],
      },
      { seq: 1, type: 'reasoning', text: 'plan' },
      { seq: 2, type: 'text', text: 'Hi' },
      { seq: 3, type: 'finish', reason: 'stop', usage, timings },
    ]);
    assert.equal(content, '[THINK]plan[/THINK]Hi');
    assert.equal(message?.content, '[THINK]plan[/THINK]Hi');
  });

  it('openai chat codec - errors use the OpenAI shape', () => {
    assert.deepEqual(openAiError({ code: 'model_not_found', message: 'no such model' }), {
      error: { message: 'no such model', type: 'not_found_error', param: null, code: 'model_not_found' },
    });
  });

  it(
    'openai chat codec - several choices: each its own index and role, ' +
      'one usage chunk after the last finish; one body with every choice',
    () => {
      const finish = (seq: number): StreamEvent => ({ seq, type: 'finish', reason: 'stop', usage, timings });
      const encoder = new ChatChoicesEncoder({ id: 'c', model: 'm', created: 1, includeUsage: true, choices: 2 });
      const first = encoder.encode({ seq: 0, type: 'text', text: 'a' }, 1);
      assert.deepEqual((first[0]?.choices as unknown[])[0], {
        index: 1,
        delta: { role: 'assistant', content: 'a' },
        logprobs: null,
        finish_reason: null,
      });
      const second = encoder.encode({ seq: 0, type: 'text', text: 'b' }, 0);
      assert.deepEqual(
        (second[0]?.choices as Array<{ delta: unknown }>)[0]?.delta,
        { role: 'assistant', content: 'b' },
        'each choice starts with the role',
      );
      assert.equal(encoder.encode(finish(1), 0).length, 1, 'no usage before the last choice finishes');
      const last = encoder.encode(finish(1), 1);
      assert.deepEqual(last[1]?.choices, []);
      assert.equal((last[1]?.usage as { completion_tokens: number }).completion_tokens, 6);

      const body = new ChatChoicesAggregator({ id: 'c', model: 'm', created: 1, choices: 2 });
      body.add({ seq: 0, type: 'text', text: 'x' }, 1);
      body.add({ seq: 0, type: 'text', text: 'y' }, 0);
      body.add(finish(1), 0);
      body.add(finish(1), 1);
      const whole = body.body() as {
        choices: Array<{ index: number; message: { content: string } }>;
        usage: { completion_tokens: number };
      };
      assert.deepEqual(
        whole.choices.map((c) => [c.index, c.message.content]),
        [
          [0, 'y'],
          [1, 'x'],
        ],
      );
      assert.equal(whole.usage.completion_tokens, 6);
    },
  );
});
