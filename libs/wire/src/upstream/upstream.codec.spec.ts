import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError, type CanonicalRequest } from '@cortex/contracts';
import { SseParser } from '../sse.js';
import { UPSTREAM_CODECS, type UpstreamEvent } from './upstream.codec.js';

const PIXEL = 'iVBORw0KGgo=';

/** A conversation with every kind of turn: two system messages, an image, a call, its result. */
const conversation: CanonicalRequest = {
  model: 'front-name',
  messages: [
    { role: 'system', content: 'Be brief.' },
    { role: 'system', content: 'Answer in English.' },
    {
      role: 'user',
      content: 'Look: and the weather?',
      images: [{ at: 5, part: 'messages[2].content[1]', data: PIXEL, mediaType: 'image/png' }],
    },
    {
      role: 'assistant',
      content: '',
      toolCalls: [{ id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' }],
    },
    { role: 'tool', content: '{"temperature": 21}', toolCallId: 'call_1' },
  ],
  tools: [{ name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } }],
  sampling: { maxTokens: 100, temperature: 0.5 },
  stream: false,
};
const options = { model: 'upstream-name', reasoning: false };

/** Runs an SSE transcript through an API's decoder, cut into pieces of `size` characters. */
function decode(api: 'chat' | 'responses' | 'messages', sse: string, size = 7): UpstreamEvent[] {
  const decoder = UPSTREAM_CODECS[api].decoder();
  const parser = new SseParser();
  const out: UpstreamEvent[] = [];
  for (let at = 0; at < sse.length; at += size)
    for (const message of parser.push(sse.slice(at, at + size))) out.push(...decoder.push(message));
  assert.equal(decoder.done, true, `${api}: the decoder saw the end`);
  return out;
}
const frames = (events: Array<[string | null, unknown]>): string =>
  events.map(([event, data]) => `${event ? `event: ${event}\n` : ''}data: ${JSON.stringify(data)}\n\n`).join('');

describe('upstream codecs', () => {
  it('upstream - chat: the body carries every turn, images as data URIs, the calls and results, streamed with usage', () => {
    const { path, body } = UPSTREAM_CODECS.chat.encode(conversation, options);
    assert.equal(path, '/chat/completions');
    assert.deepEqual(body, {
      model: 'upstream-name',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'system', content: 'Answer in English.' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Look:' },
            { type: 'image_url', image_url: { url: `data:image/png;base64,${PIXEL}` } },
            { type: 'text', text: ' and the weather?' },
          ],
        },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'call_1', content: '{"temperature": 21}' },
      ],
      stream: true,
      stream_options: { include_usage: true },
      tools: [
        {
          type: 'function',
          function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
        },
      ],
      max_tokens: 100,
      temperature: 0.5,
    });
  });

  it('upstream - responses: system messages become instructions, turns become items', () => {
    const { path, body } = UPSTREAM_CODECS.responses.encode(conversation, options);
    assert.equal(path, '/responses');
    assert.equal(body.instructions, 'Be brief.\n\nAnswer in English.');
    assert.equal(body.max_output_tokens, 100);
    assert.equal(body.store, false);
    assert.deepEqual(body.input, [
      {
        type: 'message',
        role: 'user',
        content: [
          { type: 'input_text', text: 'Look:' },
          { type: 'input_image', image_url: `data:image/png;base64,${PIXEL}` },
          { type: 'input_text', text: ' and the weather?' },
        ],
      },
      { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { type: 'function_call_output', call_id: 'call_1', output: '{"temperature": 21}' },
    ]);
  });

  it('upstream - messages: system flattened, base64 images, tool_use with parsed input, results in a user turn', () => {
    const { path, body } = UPSTREAM_CODECS.messages.encode(
      {
        ...conversation,
        sampling: {},
        messages: [
          ...conversation.messages,
          { role: 'assistant', content: '', toolCalls: [{ id: 'call_2', name: 'get_weather', arguments: 'not json' }] },
        ],
      },
      { ...options, reasoning: true },
    );
    assert.equal(path, '/messages');
    assert.equal(body.system, 'Be brief.\n\nAnswer in English.');
    assert.equal(body.max_tokens, 8192, 'Anthropic requires max_tokens: 8192 when the request has none');
    assert.deepEqual(body.thinking, { type: 'enabled', budget_tokens: 4096 });
    assert.deepEqual(body.messages, [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Look:' },
          { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PIXEL } },
          { type: 'text', text: ' and the weather?' },
        ],
      },
      {
        role: 'assistant',
        content: [{ type: 'tool_use', id: 'call_1', name: 'get_weather', input: { city: 'Paris' } }],
      },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'call_1', content: '{"temperature": 21}' }] },
      // Arguments that are not JSON still serialise.
      { role: 'assistant', content: [{ type: 'tool_use', id: 'call_2', name: 'get_weather', input: 'not json' }] },
    ]);
  });

  it('upstream - a seed goes where the format has room for one, and is left out elsewhere', () => {
    const seeded = { ...conversation, sampling: { seed: 42 } };
    assert.equal(UPSTREAM_CODECS.chat.encode(seeded, options).body.seed, 42);
    assert.equal(UPSTREAM_CODECS.responses.encode(seeded, options).body.seed, undefined);
    assert.equal(UPSTREAM_CODECS.messages.encode(seeded, options).body.seed, undefined);
  });

  it('upstream - an answer begun: continue_final_message for chat, a last assistant turn for messages, refused by responses', () => {
    const begun: CanonicalRequest = {
      ...conversation,
      messages: [{ role: 'user', content: 'Sing.' }],
      prefill: 'Round and round ',
    };
    const chat = UPSTREAM_CODECS.chat.encode(begun, options);
    assert.deepEqual((chat.body.messages as unknown[]).at(-1), { role: 'assistant', content: 'Round and round ' });
    assert.equal(chat.body.continue_final_message, true);
    assert.equal(chat.body.add_generation_prompt, false);
    assert.equal(chat.heldBack, undefined);
    // Anthropic refuses a prefill that ends in white space: it is held back, and the answer's first text gives it.
    const messages = UPSTREAM_CODECS.messages.encode(begun, options);
    assert.deepEqual((messages.body.messages as unknown[]).at(-1), {
      role: 'assistant',
      content: [{ type: 'text', text: 'Round and round' }],
    });
    assert.equal(messages.heldBack, ' ');
    assert.equal(UPSTREAM_CODECS.messages.encode({ ...begun, prefill: 'Round' }, options).heldBack, undefined);
    assert.throws(
      () => UPSTREAM_CODECS.responses.encode(begun, options),
      (error: unknown) =>
        error instanceof CortexError &&
        error.extra.param === 'messages' &&
        /cannot go on from an answer already begun/.test(error.message),
    );
  });

  it('upstream - what a format cannot carry is refused naming the field', () => {
    const cases: Array<[keyof typeof UPSTREAM_CODECS, Partial<CanonicalRequest>, string]> = [
      ['responses', { sampling: { stop: ['\n'] } }, 'stop'],
      ['responses', { sampling: { topK: 5 } }, 'top_k'],
      ['responses', { logprobs: 2 }, 'logprobs'],
      ['messages', { sampling: { frequencyPenalty: 1 } }, 'frequency_penalty'],
      ['messages', { sampling: { temperature: 1.5 } }, 'temperature'],
      ['messages', { responseFormat: { type: 'json_object' } }, 'response_format'],
      ['chat', { sampling: { xtc: { probability: 0.5, threshold: 0.1 } } }, 'xtc_probability'],
      ['chat', { raw: { text: 'Once upon' } }, 'prompt'],
    ];
    for (const [api, change, param] of cases) {
      assert.throws(
        () => UPSTREAM_CODECS[api].encode({ ...conversation, ...change }, options),
        (error: unknown) =>
          error instanceof CortexError && error.code === 'invalid_request' && error.extra.param === param,
        `${api}: ${param}`,
      );
    }
  });

  it('upstream - chat: reasoning, text, calls by index with arguments in pieces, finish and usage, in any chunking', () => {
    const sse =
      frames([
        [null, { choices: [{ index: 0, delta: { role: 'assistant', reasoning_content: 'Think' } }] }],
        [null, { choices: [{ index: 0, delta: { content: 'Hi' }, finish_reason: null }] }],
        [
          null,
          {
            choices: [
              { index: 0, delta: { tool_calls: [{ index: 0, id: 'c1', function: { name: 'f', arguments: '{"a"' } }] } },
            ],
          },
        ],
        [null, { choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: ':1}' } }] } }] }],
        [null, { choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] }],
        [
          null,
          {
            choices: [],
            usage: { prompt_tokens: 10, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 4 } },
          },
        ],
      ]) + 'data: [DONE]\n\n';
    for (const size of [1, 7, 1000])
      assert.deepEqual(decode('chat', sse, size), [
        { type: 'reasoning', text: 'Think' },
        { type: 'text', text: 'Hi' },
        { type: 'tool_call', index: 0, id: 'c1', name: 'f' },
        { type: 'tool_args', index: 0, delta: '{"a"' },
        { type: 'tool_args', index: 0, delta: ':1}' },
        { type: 'finish', reason: 'tool_calls' },
        { type: 'usage', usage: { promptTokens: 10, completionTokens: 5, cachedPromptTokens: 4 } },
      ]);
  });

  it('upstream - responses: deltas by event, a call correlated by output_index, arguments given only at done, completed', () => {
    const sse = frames([
      ['response.created', { type: 'response.created', response: { status: 'in_progress' } }],
      ['response.reasoning_summary_text.delta', { type: 'response.reasoning_summary_text.delta', delta: 'Hm' }],
      ['response.output_text.delta', { type: 'response.output_text.delta', output_index: 1, delta: 'Yes' }],
      [
        'response.output_item.added',
        {
          type: 'response.output_item.added',
          output_index: 2,
          item: { type: 'function_call', call_id: 'c1', name: 'f' },
        },
      ],
      [
        'response.output_item.done',
        { type: 'response.output_item.done', output_index: 2, item: { type: 'function_call', arguments: '{}' } },
      ],
      [
        'response.completed',
        {
          type: 'response.completed',
          response: { usage: { input_tokens: 7, output_tokens: 3, output_tokens_details: { reasoning_tokens: 1 } } },
        },
      ],
    ]);
    assert.deepEqual(decode('responses', sse), [
      { type: 'reasoning', text: 'Hm' },
      { type: 'text', text: 'Yes' },
      { type: 'tool_call', index: 0, id: 'c1', name: 'f' },
      { type: 'tool_args', index: 0, delta: '{}' },
      { type: 'usage', usage: { promptTokens: 7, completionTokens: 3, reasoningTokens: 1 } },
      { type: 'finish', reason: 'tool_calls' },
    ]);
    const incomplete = frames([['response.incomplete', { type: 'response.incomplete', response: {} }]]);
    assert.deepEqual(decode('responses', incomplete), [{ type: 'finish', reason: 'length' }]);
  });

  it('upstream - messages: usage with cache reads, thinking, text, streamed and pre-buffered tool input, stop reason; ping ignored', () => {
    const sse = frames([
      [
        'message_start',
        {
          type: 'message_start',
          message: {
            usage: { input_tokens: 3, cache_read_input_tokens: 5, cache_creation_input_tokens: 2, output_tokens: 1 },
          },
        },
      ],
      ['ping', { type: 'ping' }],
      [
        'content_block_start',
        { type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '' } },
      ],
      [
        'content_block_delta',
        { type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: 'Hm' } },
      ],
      ['content_block_delta', { type: 'content_block_delta', index: 1, delta: { type: 'text_delta', text: 'Yes' } }],
      [
        'content_block_start',
        { type: 'content_block_start', index: 2, content_block: { type: 'tool_use', id: 't1', name: 'f', input: {} } },
      ],
      [
        'content_block_delta',
        { type: 'content_block_delta', index: 2, delta: { type: 'input_json_delta', partial_json: '{"a":1}' } },
      ],
      [
        'content_block_start',
        {
          type: 'content_block_start',
          index: 3,
          content_block: { type: 'tool_use', id: 't2', name: 'g', input: { b: 2 } },
        },
      ],
      ['message_delta', { type: 'message_delta', delta: { stop_reason: 'tool_use' }, usage: { output_tokens: 9 } }],
      ['message_stop', { type: 'message_stop' }],
    ]);
    assert.deepEqual(decode('messages', sse), [
      { type: 'usage', usage: { promptTokens: 10, cachedPromptTokens: 5, completionTokens: 1 } },
      { type: 'reasoning', text: 'Hm' },
      { type: 'text', text: 'Yes' },
      { type: 'tool_call', index: 0, id: 't1', name: 'f' },
      { type: 'tool_args', index: 0, delta: '{"a":1}' },
      { type: 'tool_call', index: 1, id: 't2', name: 'g' },
      { type: 'tool_args', index: 1, delta: '{"b":2}' },
      { type: 'usage', usage: { promptTokens: 10, cachedPromptTokens: 5, completionTokens: 9 } },
      { type: 'finish', reason: 'tool_calls' },
    ]);
    const failed = frames([['error', { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }]]);
    assert.deepEqual(decode('messages', failed), [{ type: 'error', message: 'Overloaded', status: 529 }]);
  });
});
