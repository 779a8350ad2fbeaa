import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError, ErrorCodes, type ErrorCode, type StreamEvent } from '@cortex/contracts';
import { decodeMessagesRequest } from './messages.decoder.js';
import {
  MessagesAggregator,
  MessagesStreamEncoder,
  THINKING_SIGNATURE,
  anthropicError,
  anthropicErrorType,
} from './messages.encoder.js';
import type { AnthropicFrame } from './messages.types.js';

function invalid(body: unknown, param: string): void {
  assert.throws(
    () => decodeMessagesRequest(body),
    (error: Error) =>
      error instanceof CortexError &&
      error.code === 'invalid_request' &&
      error.extra.param === param &&
      error.message.startsWith(`${param}: `),
    `expected invalid_request on ${param}`,
  );
}

const user = (content: unknown) => ({ role: 'user', content });
const base = { model: 'm', max_tokens: 64, messages: [user('hi')] };
const usage = { promptTokens: 10, cachedPromptTokens: 4, completionTokens: 3, reasoningTokens: 1 };
const timings = { ttftMs: 1, promptMs: 1, decodeTokensPerSecond: 100, durationMs: 10, queueMs: 0 };
const options = { id: 'msg_1', model: 'claude-x', thinking: false };

/** Numbers events in order, as a worker does. */
function events(...bodies: Array<Record<string, unknown>>): StreamEvent[] {
  return bodies.map((body, seq) => ({ seq, ...body }) as StreamEvent);
}
// 4 of the 10 prompt tokens were cached: message_start says so already, as the final usage does.
const start = {
  type: 'start',
  runId: 'r',
  workerId: 'w',
  model: 'worker-model',
  promptTokens: 10,
  cachedPromptTokens: 4,
};
const finish = (reason: string) => ({ type: 'finish', reason, usage, timings });

function encodeAll(list: StreamEvent[], thinking = false): AnthropicFrame[] {
  const encoder = new MessagesStreamEncoder({ ...options, thinking });
  return list.flatMap((event) => encoder.encode(event));
}

function aggregate(list: StreamEvent[], thinking = false) {
  const aggregator = new MessagesAggregator({ ...options, thinking });
  for (const event of list) aggregator.add(event);
  return aggregator.body();
}

const messageStart = {
  event: 'message_start',
  data: {
    type: 'message_start',
    message: {
      id: 'msg_1',
      type: 'message',
      role: 'assistant',
      model: 'claude-x',
      content: [],
      stop_reason: null,
      stop_sequence: null,
      stop_details: null,
      usage: { input_tokens: 6, output_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 4 },
    },
  },
};
const finalUsage = { input_tokens: 6, output_tokens: 3, cache_creation_input_tokens: 0, cache_read_input_tokens: 4 };
const ending = (stopReason: string, stopSequence: string | null = null) => [
  {
    event: 'message_delta',
    data: {
      type: 'message_delta',
      delta: { stop_reason: stopReason, stop_sequence: stopSequence, stop_details: null },
      usage: finalUsage,
    },
  },
  { event: 'message_stop', data: { type: 'message_stop' } },
];
const blockStart = (index: number, block: unknown) => ({
  event: 'content_block_start',
  data: { type: 'content_block_start', index, content_block: block },
});
const blockDelta = (index: number, delta: unknown) => ({
  event: 'content_block_delta',
  data: { type: 'content_block_delta', index, delta },
});
const blockStop = (index: number) => ({ event: 'content_block_stop', data: { type: 'content_block_stop', index } });

describe('anthropic messages codec', () => {
  it('anthropic codec - decodes model, system, sampling and stream', () => {
    const { request, thinking } = decodeMessagesRequest({
      ...base,
      system: 'be brief',
      temperature: 0.5,
      top_p: 0.9,
      top_k: 40,
      stop_sequences: ['END'],
      stream: true,
      metadata: { user_id: 'u1' },
      service_tier: 'auto',
      container: 'c',
    });
    assert.equal(thinking, false);
    assert.deepEqual(request, {
      model: 'm',
      messages: [
        { role: 'system', content: 'be brief' },
        { role: 'user', content: 'hi' },
      ],
      sampling: { maxTokens: 64, temperature: 0.5, topP: 0.9, topK: 40, stop: ['END'] },
      stream: true,
    });
  });

  it('anthropic codec - a last assistant turn of text is a prefill the answer goes on from; one with a tool_use is not', () => {
    const { request } = decodeMessagesRequest({
      ...base,
      messages: [
        { role: 'user', content: 'Answer in JSON.' },
        { role: 'assistant', content: [{ type: 'text', text: '{"answer":' }] },
      ],
    });
    assert.deepEqual(request.messages, [{ role: 'user', content: 'Answer in JSON.' }]);
    assert.equal(request.prefill, '{"answer":');
    const called = decodeMessagesRequest({
      ...base,
      messages: [
        { role: 'user', content: 'Weather?' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'w', input: {} }] },
      ],
    }).request;
    assert.equal(called.prefill, undefined);
    assert.equal(called.messages.at(-1)?.role, 'assistant');
  });

  it('anthropic codec - system text blocks and user text blocks become one message each', () => {
    const { request } = decodeMessagesRequest({
      ...base,
      system: [
        { type: 'text', text: 'one' },
        { type: 'text', text: 'two', cache_control: { type: 'ephemeral' } },
      ],
      messages: [
        user([
          { type: 'text', text: 'a' },
          { type: 'text', text: 'b' },
        ]),
      ],
    });
    assert.deepEqual(request.messages, [
      { role: 'system', content: 'one\ntwo' },
      { role: 'user', content: 'a\nb' },
    ]);
    assert.equal(request.stream, false);
  });

  it('anthropic codec - a tool_result whose tool_use_id no earlier tool_use has is refused, naming the block', () => {
    const turns = [
      user('weather?'),
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'weather', input: {} }] },
      user([{ type: 'tool_result', tool_use_id: 'toolu_9' }]),
    ];
    assert.throws(
      () => decodeMessagesRequest({ ...base, messages: turns }),
      (error: unknown) =>
        error instanceof CortexError &&
        error.extra.param === 'messages[2].content[0].tool_use_id' &&
        error.message.includes("'toolu_9'"),
    );
  });

  it('anthropic codec - a multi-turn tool round trip keeps call ids, thinking and results in order', () => {
    const { request } = decodeMessagesRequest({
      ...base,
      messages: [
        user('weather in Paris and Rome?'),
        {
          role: 'assistant',
          content: [
            { type: 'thinking', thinking: 'need the tool', signature: 'sig' },
            { type: 'redacted_thinking', data: 'opaque' },
            { type: 'text', text: 'Checking.' },
            { type: 'tool_use', id: 'toolu_1', name: 'weather', input: { city: 'Paris' } },
            { type: 'tool_use', id: 'toolu_2', name: 'weather', input: { city: 'Rome' } },
          ],
        },
        user([
          { type: 'tool_result', tool_use_id: 'toolu_1', content: '20C' },
          {
            type: 'tool_result',
            tool_use_id: 'toolu_2',
            content: [
              { type: 'text', text: 'no' },
              { type: 'text', text: 'data' },
            ],
            is_error: true,
          },
          { type: 'text', text: 'and tomorrow?' },
        ]),
        {
          role: 'assistant',
          content: [
            { type: 'text', text: 'Sunny.' },
            { type: 'tool_use', id: 'toolu_3', name: 'weather', input: { city: 'Oslo' } },
          ],
        },
        user([{ type: 'tool_result', tool_use_id: 'toolu_3' }]),
      ],
    });
    assert.deepEqual(request.messages, [
      { role: 'user', content: 'weather in Paris and Rome?' },
      {
        role: 'assistant',
        content: 'Checking.',
        reasoning: 'need the tool',
        toolCalls: [
          { id: 'toolu_1', name: 'weather', arguments: '{"city":"Paris"}' },
          { id: 'toolu_2', name: 'weather', arguments: '{"city":"Rome"}' },
        ],
      },
      { role: 'tool', content: '20C', toolCallId: 'toolu_1' },
      { role: 'tool', content: 'Error: no\ndata', toolCallId: 'toolu_2' },
      { role: 'user', content: 'and tomorrow?' },
      {
        role: 'assistant',
        content: 'Sunny.',
        toolCalls: [{ id: 'toolu_3', name: 'weather', arguments: '{"city":"Oslo"}' }],
      },
      { role: 'tool', content: '', toolCallId: 'toolu_3' },
    ]);
  });

  it('anthropic codec - a strict tool is strict', () => {
    const tools = [
      { name: 'a', input_schema: { type: 'object' }, strict: true },
      { name: 'b', input_schema: { type: 'object' } },
    ];
    assert.deepEqual(
      decodeMessagesRequest({ ...base, tools }).request.tools?.map((t) => t.strict),
      [true, undefined],
    );
    invalid({ ...base, tools: [{ name: 'a', input_schema: { type: 'object' }, strict: 1 }] }, 'tools[0].strict');
  });

  it('anthropic codec - custom tools and every tool_choice', () => {
    const tools = [
      {
        name: 'weather',
        description: 'get weather',
        input_schema: { type: 'object', properties: { city: { type: 'string' } } },
      },
      { type: 'custom', name: 'time', input_schema: { type: 'object' } },
    ];
    const decode = (tool_choice?: unknown) => decodeMessagesRequest({ ...base, tools, tool_choice }).request;
    assert.deepEqual(decode().tools, [
      {
        name: 'weather',
        description: 'get weather',
        parameters: { type: 'object', properties: { city: { type: 'string' } } },
      },
      { name: 'time', parameters: { type: 'object' } },
    ]);
    assert.equal(decode().toolChoice, undefined);
    assert.equal(decode({ type: 'auto', disable_parallel_tool_use: true }).toolChoice, 'auto');
    assert.equal(decode({ type: 'any' }).toolChoice, 'required');
    assert.equal(decode({ type: 'tool', name: 'time' }).toolChoice, 'function:time');
    const none = decode({ type: 'none' });
    assert.equal(none.tools, undefined);
    assert.equal(none.toolChoice, undefined);
  });

  it('anthropic codec - thinking config sets the flag; output_config maps to a JSON schema format', () => {
    const flag = (thinking: unknown) => decodeMessagesRequest({ ...base, thinking }).thinking;
    assert.equal(flag(undefined), false);
    assert.equal(flag({ type: 'disabled' }), false);
    assert.equal(flag({ type: 'enabled', budget_tokens: 1024 }), true);
    assert.equal(flag({ type: 'adaptive' }), true);
    const schema = { type: 'object', properties: { a: { type: 'number' } } };
    const { request } = decodeMessagesRequest({
      ...base,
      output_config: { effort: 'low', format: { type: 'json_schema', schema } },
    });
    assert.deepEqual(request.responseFormat, { type: 'json_schema', schema });
  });

  it('anthropic codec - a JSON schema that is not an object or does not compile is a 400 naming it', () => {
    invalid(
      { ...base, output_config: { format: { type: 'json_schema', schema: 'x' } } },
      'output_config.format.schema',
    );
    invalid(
      { ...base, output_config: { format: { type: 'json_schema', schema: { type: 'objekt' } } } },
      'output_config.format.schema',
    );
    invalid(
      { ...base, tools: [{ name: 'f', input_schema: { type: 'object', properties: 3 } }] },
      'tools[0].input_schema',
    );
    // The beta's older top-level `output_format` (still sent by @anthropic-ai/sdk's beta helpers) means the same.
    const schema = { type: 'object', properties: { n: { type: 'integer' } } };
    assert.deepEqual(
      decodeMessagesRequest({ ...base, output_format: { type: 'json_schema', schema } }).request.responseFormat,
      { type: 'json_schema', schema },
    );
    invalid({ ...base, output_format: { type: 'json_schema', schema: [] } }, 'output_format.schema');
  });

  it('anthropic codec - invalid bodies name the field', () => {
    invalid(null, 'body');
    invalid({ max_tokens: 5, messages: [user('x')] }, 'model');
    invalid({ model: 'm', messages: [user('x')] }, 'max_tokens');
    invalid({ ...base, max_tokens: 0 }, 'max_tokens');
    invalid({ ...base, max_tokens: 1.5 }, 'max_tokens');
    invalid({ ...base, messages: [] }, 'messages');
    invalid({ ...base, messages: [{ role: 'system', content: 'x' }] }, 'messages');
    invalid({ ...base, messages: [{ role: 'tool', content: 'x' }] }, 'messages[0].role');
    invalid(
      { ...base, messages: [user('hi'), { role: 'system', content: [{ type: 'image' }] }] },
      'messages[1].content[0].type',
    );
    invalid({ ...base, messages: [user(5)] }, 'messages[0].content');
    invalid({ ...base, messages: [user([{ type: 'image' }])] }, 'messages[0].content[0].source');
    invalid(
      { ...base, messages: [user([{ type: 'document', source: { type: 'text', data: '' } }])] },
      'messages[0].content[0]',
    );
    invalid(
      { ...base, messages: [user([{ type: 'tool_use', id: 'a', name: 'b', input: {} }])] },
      'messages[0].content[0].type',
    );
    invalid(
      { ...base, messages: [{ role: 'assistant', content: [{ type: 'tool_result', tool_use_id: 'a' }] }] },
      'messages[0].content[0].type',
    );
    invalid(
      { ...base, messages: [{ role: 'assistant', content: [{ type: 'tool_use', id: 'a', name: 'b', input: 'x' }] }] },
      'messages[0].content[0].input',
    );
    invalid(
      { ...base, messages: [user([{ type: 'tool_result', content: 'x' }])] },
      'messages[0].content[0].tool_use_id',
    );
    invalid(
      { ...base, messages: [user([{ type: 'tool_result', tool_use_id: 'a', content: [{ type: 'image' }] }])] },
      'messages[0].content[0].content[0].source',
    );
    invalid({ ...base, messages: [user([{ type: 'wat' }])] }, 'messages[0].content[0].type');
    invalid({ ...base, system: [{ type: 'text' }] }, 'system[0].text');
    invalid({ ...base, temperature: 1.5 }, 'temperature');
    invalid({ ...base, top_k: -1 }, 'top_k');
    invalid({ ...base, stop_sequences: 'END' }, 'stop_sequences');
    invalid({ ...base, stop_sequences: [''] }, 'stop_sequences');
    invalid({ ...base, metadata: 'x' }, 'metadata');
    invalid({ ...base, stream: 'yes' }, 'stream');
    invalid({ ...base, thinking: { type: 'enabled' } }, 'thinking.budget_tokens');
    invalid({ ...base, thinking: { type: 'on' } }, 'thinking.type');
    invalid({ ...base, tools: [{ name: 'w' }] }, 'tools[0].input_schema');
    invalid(
      { ...base, tools: [{ name: 'w', input_schema: {} }], tool_choice: { type: 'tool', name: 'nope' } },
      'tool_choice.name',
    );
    invalid({ ...base, tool_choice: { type: 'function' } }, 'tool_choice.type');
    invalid({ ...base, output_config: { format: { type: 'json_schema' } } }, 'output_config.format.schema');
  });

  it('anthropic codec - a system turn mid-conversation stays where it stands, as a string or text blocks', () => {
    const { request } = decodeMessagesRequest({
      ...base,
      system: 'first',
      messages: [
        user('hi'),
        { role: 'system', content: 'now' },
        { role: 'assistant', content: 'ok' },
        {
          role: 'system',
          content: [
            { type: 'text', text: 'a', cache_control: { type: 'ephemeral' } },
            { type: 'text', text: 'b' },
          ],
        },
        user('go'),
      ],
    });
    assert.deepEqual(request.messages, [
      { role: 'system', content: 'first' },
      { role: 'user', content: 'hi' },
      { role: 'system', content: 'now' },
      { role: 'assistant', content: 'ok' },
      { role: 'system', content: 'a\nb' },
      { role: 'user', content: 'go' },
    ]);
  });

  it('anthropic codec - server tools are dropped and named, or rejected under hosted_tools reject', () => {
    const body = {
      ...base,
      tools: [
        { type: 'web_search_20250305', name: 'web_search' },
        { name: 'w', input_schema: { type: 'object' }, defer_loading: true },
        { type: 'bash_20250124', name: 'bash' },
      ],
    };
    const { request, droppedTools } = decodeMessagesRequest(body);
    assert.deepEqual(request.tools, [{ name: 'w', parameters: { type: 'object' } }]);
    assert.deepEqual(droppedTools, [
      'tools[0] (server tool "web_search_20250305")',
      'tools[2] (server tool "bash_20250124")',
    ]);
    assert.throws(
      () => decodeMessagesRequest(body, { hostedTools: 'reject' }),
      (error: Error) =>
        error instanceof CortexError &&
        error.extra.param === 'tools[0].type' &&
        /"web_search_20250305" is not supported/.test(error.message),
    );
  });

  it('anthropic codec - adaptive thinking, output_config.effort and unknown fields are accepted', () => {
    const decoded = decodeMessagesRequest({
      ...base,
      thinking: { type: 'adaptive', display: 'omitted' },
      output_config: { effort: 'high' },
      context_management: { edits: [] },
      some_future_field: 1,
    });
    assert.equal(decoded.thinking, true);
    assert.equal(decoded.request.responseFormat, undefined);
    invalid({ ...base, output_config: { effort: 3 } }, 'output_config.effort');
  });

  it('anthropic codec - streams text as one block between message_start and message_stop', () => {
    const frames = encodeAll(
      events(
        start,
        { type: 'text', text: 'Hel' },
        { type: 'text', text: '' },
        { type: 'text', text: 'lo' },
        finish('stop'),
      ),
    );
    assert.deepEqual(frames, [
      messageStart,
      blockStart(0, { type: 'text', text: '' }),
      blockDelta(0, { type: 'text_delta', text: 'Hel' }),
      blockDelta(0, { type: 'text_delta', text: 'lo' }),
      blockStop(0),
      ...ending('end_turn'),
    ]);
    for (const { event, data } of frames) assert.equal(data.type, event);
  });

  it('anthropic codec - reasoning streams as a signed thinking block only when thinking is enabled', () => {
    const list = events(
      start,
      { type: 'reasoning', text: 'hm' },
      { type: 'reasoning', text: 'm' },
      { type: 'text', text: 'Hi' },
      finish('stop'),
    );
    assert.deepEqual(encodeAll(list, true), [
      messageStart,
      blockStart(0, { type: 'thinking', thinking: '', signature: '' }),
      blockDelta(0, { type: 'thinking_delta', thinking: 'hm' }),
      blockDelta(0, { type: 'thinking_delta', thinking: 'm' }),
      blockDelta(0, { type: 'signature_delta', signature: THINKING_SIGNATURE }),
      blockStop(0),
      blockStart(1, { type: 'text', text: '' }),
      blockDelta(1, { type: 'text_delta', text: 'Hi' }),
      blockStop(1),
      ...ending('end_turn'),
    ]);
    assert.deepEqual(encodeAll(list, false), [
      messageStart,
      blockStart(0, { type: 'text', text: '' }),
      blockDelta(0, { type: 'text_delta', text: 'Hi' }),
      blockStop(0),
      ...ending('end_turn'),
    ]);
    assert.deepEqual(aggregate(list, true).content, [
      { type: 'thinking', thinking: 'hmm', signature: THINKING_SIGNATURE },
      { type: 'text', text: 'Hi' },
    ]);
    assert.deepEqual(aggregate(list, false).content, [{ type: 'text', text: 'Hi' }]);
  });

  it('anthropic codec - a tool call streams argument chunks and stops with tool_use', () => {
    const list = events(
      start,
      { type: 'text', text: 'Checking.' },
      { type: 'keepalive' },
      { type: 'tool_call', index: 0, id: 'call_1', name: 'weather' },
      { type: 'tool_args', index: 0, delta: '{"city":' },
      { type: 'tool_args', index: 0, delta: '"Paris"}' },
      { type: 'tool_call', index: 1, id: 'call_2', name: 'time' },
      finish('tool_calls'),
    );
    assert.deepEqual(encodeAll(list), [
      messageStart,
      blockStart(0, { type: 'text', text: '' }),
      blockDelta(0, { type: 'text_delta', text: 'Checking.' }),
      { event: 'ping', data: { type: 'ping' } },
      blockStop(0),
      blockStart(1, { type: 'tool_use', id: 'call_1', name: 'weather', input: {} }),
      blockDelta(1, { type: 'input_json_delta', partial_json: '{"city":' }),
      blockDelta(1, { type: 'input_json_delta', partial_json: '"Paris"}' }),
      blockStop(1),
      blockStart(2, { type: 'tool_use', id: 'call_2', name: 'time', input: {} }),
      blockStop(2),
      ...ending('tool_use'),
    ]);
    assert.deepEqual(aggregate(list), {
      id: 'msg_1',
      type: 'message',
      role: 'assistant',
      model: 'claude-x',
      content: [
        { type: 'text', text: 'Checking.' },
        { type: 'tool_use', id: 'call_1', name: 'weather', input: { city: 'Paris' } },
        { type: 'tool_use', id: 'call_2', name: 'time', input: {} },
      ],
      stop_reason: 'tool_use',
      stop_sequence: null,
      stop_details: null,
      usage: finalUsage,
    });
  });

  it('anthropic codec - unparseable tool arguments become {} plus a text block', () => {
    const body = aggregate(
      events(
        { type: 'tool_call', index: 0, id: 'c', name: 'w' },
        { type: 'tool_args', index: 0, delta: '{"a":' },
        finish('tool_calls'),
      ),
    );
    assert.deepEqual(body.content, [
      { type: 'tool_use', id: 'c', name: 'w', input: {} },
      { type: 'text', text: '{"a":' },
    ]);
  });

  it('anthropic codec - stop reasons: length, the stop sequence of the finish event, and a stream without start', () => {
    const frames = encodeAll(events({ type: 'text', text: 'x' }, finish('length')));
    assert.equal(frames[0]?.event, 'message_start', 'message_start comes first even without a start event');
    assert.deepEqual(frames.slice(-2), ending('max_tokens'));
    assert.deepEqual(encodeAll(events(start, { ...finish('stop'), stopSequence: 'END' })), [
      messageStart,
      ...ending('stop_sequence', 'END'),
    ]);
    const body = aggregate(events(start, { type: 'text', text: 'x' }, { ...finish('stop'), stopSequence: 'END' }));
    assert.equal(body.stop_reason, 'stop_sequence');
    assert.equal(body.stop_sequence, 'END');
    assert.equal(aggregate(events(start, finish('cancelled'))).stop_reason, 'end_turn');
  });

  it('anthropic codec - an error event ends the stream with an error frame', () => {
    const encoder = new MessagesStreamEncoder(options);
    const list = events(
      start,
      { type: 'text', text: 'x' },
      { type: 'error', error: { code: 'worker_lost', message: 'gone' } },
      { type: 'text', text: 'late' },
      finish('error'),
    );
    const frames = list.flatMap((event) => encoder.encode(event));
    assert.deepEqual(frames.at(-1), {
      event: 'error',
      data: { type: 'error', error: { type: 'api_error', message: 'gone' } },
    });
    assert.equal(frames.length, 4);
    assert.equal(encoder.isEnded, true);
  });

  it('anthropic codec - every cortex error code maps to an Anthropic error type', () => {
    const anthropicTypes = [
      'invalid_request_error',
      'authentication_error',
      'permission_error',
      'not_found_error',
      'request_too_large',
      'rate_limit_error',
      'timeout_error',
      'api_error',
      'overloaded_error',
    ];
    for (const code of Object.keys(ErrorCodes) as ErrorCode[])
      assert.ok(anthropicTypes.includes(anthropicErrorType(code)), code);
    const type = (code: ErrorCode) => anthropicError({ code, message: 'm' }).error.type;
    assert.equal(type('invalid_request'), 'invalid_request_error');
    assert.equal(type('unauthorized'), 'authentication_error');
    assert.equal(type('model_not_found'), 'not_found_error');
    assert.equal(type('payload_too_large'), 'request_too_large');
    assert.equal(type('busy'), 'rate_limit_error');
    assert.equal(type('no_worker'), 'overloaded_error');
    assert.equal(type('model_load_failed'), 'overloaded_error');
    assert.equal(type('timeout'), 'timeout_error');
    assert.equal(type('worker_lost'), 'api_error');
    assert.equal(type('internal'), 'api_error');
    assert.equal(type('made_up' as ErrorCode), 'api_error');
    assert.deepEqual(anthropicError({ code: 'not_found', message: 'no such model', param: 'model' }), {
      type: 'error',
      error: { type: 'not_found_error', message: 'no such model' },
    });
  });
});

describe('anthropic messages codec - MCP connector blocks', () => {
  const call = {
    seq: 1,
    type: 'mcp_call' as const,
    id: 'mcp_1',
    serverLabel: 'docs',
    name: 'search',
    arguments: '{"q":"x"}',
  };
  const events: StreamEvent[] = [
    { seq: 0, type: 'start', promptTokens: 10, cachedPromptTokens: 0 } as StreamEvent,
    { seq: 1, type: 'mcp_list_tools', id: 'mcpl_1', serverLabel: 'docs', tools: [] },
    { ...call, seq: 2, phase: 'begun' },
    { ...call, seq: 3, phase: 'ended', output: 'found it' },
    { ...call, seq: 4, id: 'mcp_2', phase: 'begun' },
    { ...call, seq: 5, id: 'mcp_2', phase: 'ended', error: 'timed out' },
    { seq: 6, type: 'text', text: 'Done.' },
    { seq: 7, type: 'finish', reason: 'stop', usage, timings } as StreamEvent,
  ];

  it('anthropic codec - an MCP call the gateway ran is an mcp_tool_use then an mcp_tool_result block; the listing is not shown', () => {
    const aggregator = new MessagesAggregator(options);
    for (const event of events) aggregator.add(event);
    assert.deepEqual(aggregator.body().content, [
      { type: 'mcp_tool_use', id: 'mcp_1', name: 'search', server_name: 'docs', input: { q: 'x' } },
      { type: 'mcp_tool_result', tool_use_id: 'mcp_1', is_error: false, content: [{ type: 'text', text: 'found it' }] },
      { type: 'mcp_tool_use', id: 'mcp_2', name: 'search', server_name: 'docs', input: { q: 'x' } },
      { type: 'mcp_tool_result', tool_use_id: 'mcp_2', is_error: true, content: [{ type: 'text', text: 'timed out' }] },
      { type: 'text', text: 'Done.' },
    ]);
    const encoder = new MessagesStreamEncoder(options);
    const frames = events.flatMap((event) => encoder.encode(event));
    const starts = frames.flatMap(({ data }) =>
      data.type === 'content_block_start' ? [[data.index, data.content_block.type]] : [],
    );
    assert.deepEqual(starts, [
      [0, 'mcp_tool_use'],
      [1, 'mcp_tool_result'],
      [2, 'mcp_tool_use'],
      [3, 'mcp_tool_result'],
      [4, 'text'],
    ]);
  });

  it('anthropic codec - an assistant turn with MCP blocks sent back reads as the calls, their results, and the text after', () => {
    const { request } = decodeMessagesRequest({
      ...base,
      messages: [
        user('find x'),
        {
          role: 'assistant',
          content: [
            { type: 'text', text: 'Looking.' },
            { type: 'mcp_tool_use', id: 'mcp_1', name: 'search', server_name: 'docs', input: { q: 'x' } },
            {
              type: 'mcp_tool_result',
              tool_use_id: 'mcp_1',
              is_error: false,
              content: [{ type: 'text', text: 'found it' }],
            },
            { type: 'text', text: 'Done.' },
          ],
        },
        user('thanks'),
      ],
    });
    assert.deepEqual(request.messages, [
      { role: 'user', content: 'find x' },
      { role: 'assistant', content: 'Looking.', toolCalls: [{ id: 'mcp_1', name: 'search', arguments: '{"q":"x"}' }] },
      { role: 'tool', content: 'found it', toolCallId: 'mcp_1' },
      { role: 'assistant', content: 'Done.' },
      { role: 'user', content: 'thanks' },
    ]);
    invalid(
      {
        ...base,
        messages: [
          user('find x'),
          { role: 'assistant', content: [{ type: 'mcp_tool_result', tool_use_id: 'mcp_9', content: 'x' }] },
          user('thanks'),
        ],
      },
      'messages[1].content[0].tool_use_id',
    );
  });
});
