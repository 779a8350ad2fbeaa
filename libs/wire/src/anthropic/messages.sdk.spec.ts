/**
 * Acceptance by the official client: a local HTTP server answers `@anthropic-ai/sdk` with what the codec
 * produces, and the SDK's own streaming accumulator (`messages.stream().finalMessage()`) must rebuild the
 * same Message the non-streaming aggregator returns.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import type { StreamEvent } from '@cortex/contracts';
import { sseFrame } from '../sse.js';
import { withReplyServer, type CannedReply } from '../testing/reply-server.js';
import { decodeMessagesRequest } from './messages.decoder.js';
import { MessagesAggregator, MessagesStreamEncoder, THINKING_SIGNATURE, anthropicError } from './messages.encoder.js';

type Reply = { status: number; json: unknown } | { sse: StreamEvent[]; thinking: boolean };

/** Runs `run` against a server that records each request body and answers with `reply`. */
function withServer(reply: Reply, run: (client: Anthropic, bodies: unknown[]) => Promise<void>): Promise<void> {
  let canned: CannedReply;
  if ('json' in reply) canned = reply;
  else {
    const encoder = new MessagesStreamEncoder({ id: 'msg_sdk', model: 'claude-x', thinking: reply.thinking });
    canned = {
      sse: reply.sse
        .flatMap((event) => encoder.encode(event))
        .map(({ event, data }) => sseFrame(data, event))
        .join(''),
    };
  }
  return withReplyServer(canned, (baseURL) => new Anthropic({ apiKey: 'test-key', baseURL, maxRetries: 0 }), run);
}

const usage = { promptTokens: 12, cachedPromptTokens: 2, completionTokens: 9, reasoningTokens: 2 };
const timings = { ttftMs: 1, promptMs: 1, decodeTokensPerSecond: 100, durationMs: 10, queueMs: 0 };
const script = (thinkingText: boolean): StreamEvent[] => {
  const bodies: Array<Record<string, unknown>> = [
    { type: 'start', runId: 'r', workerId: 'w', model: 'worker-model', promptTokens: 12 },
    { type: 'keepalive' },
    ...(thinkingText
      ? [
          { type: 'reasoning', text: 'The user ' },
          { type: 'reasoning', text: 'wants weather.' },
        ]
      : []),
    { type: 'text', text: 'Let me ' },
    { type: 'text', text: 'check.' },
    { type: 'tool_call', index: 0, id: 'call_1', name: 'weather' },
    { type: 'tool_args', index: 0, delta: '{"city":' },
    { type: 'tool_args', index: 0, delta: ' "Paris", "days": [1, 2]}' },
    { type: 'finish', reason: 'tool_calls', usage, timings },
  ];
  return bodies.map((body, seq) => ({ seq, ...body }) as StreamEvent);
};

function aggregate(list: StreamEvent[], thinking: boolean) {
  const aggregator = new MessagesAggregator({ id: 'msg_sdk', model: 'claude-x', thinking });
  for (const event of list) aggregator.add(event);
  return aggregator.body();
}

const params = {
  model: 'claude-x',
  max_tokens: 2048,
  system: [{ type: 'text' as const, text: 'You are terse.' }],
  messages: [{ role: 'user' as const, content: 'Weather in Paris?' }],
  tools: [
    {
      name: 'weather',
      description: 'Forecast',
      input_schema: { type: 'object' as const, properties: { city: { type: 'string' } } },
    },
  ],
  tool_choice: { type: 'auto' as const },
};

describe('anthropic messages codec with @anthropic-ai/sdk', () => {
  it('anthropic codec - the SDK stream accumulator rebuilds thinking, text and tool_use blocks', async () => {
    const events = script(true);
    await withServer({ sse: events, thinking: true }, async (client, bodies) => {
      const texts: string[] = [];
      const stream = client.messages.stream({ ...params, thinking: { type: 'enabled', budget_tokens: 1024 } });
      stream.on('text', (delta) => texts.push(delta));
      const { parsed_output: _parsed, ...message } = await stream.finalMessage();
      assert.deepEqual(texts, ['Let me ', 'check.']);
      assert.deepEqual(message.content, [
        { type: 'thinking', thinking: 'The user wants weather.', signature: THINKING_SIGNATURE },
        { type: 'text', text: 'Let me check.' },
        { type: 'tool_use', id: 'call_1', name: 'weather', input: { city: 'Paris', days: [1, 2] } },
      ]);
      assert.equal(message.stop_reason, 'tool_use');
      assert.deepEqual(message.usage, {
        input_tokens: 10,
        output_tokens: 9,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 2,
      });
      // Streaming and non-streaming give the same Message.
      assert.deepEqual(message, aggregate(events, true));

      // The request the SDK sent decodes, thinking flag included.
      const decoded = decodeMessagesRequest(bodies[0]);
      assert.equal(decoded.thinking, true);
      assert.equal(decoded.request.stream, true);
      assert.deepEqual(decoded.request.messages, [
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'Weather in Paris?' },
      ]);
      assert.equal(decoded.request.toolChoice, 'auto');
      assert.equal(decoded.request.sampling.maxTokens, 2048);
    });
  });

  it('anthropic codec - without thinking the SDK sees no thinking block', async () => {
    await withServer({ sse: script(true), thinking: false }, async (client) => {
      const message = await client.messages.stream(params).finalMessage();
      assert.deepEqual(
        message.content.map((block) => block.type),
        ['text', 'tool_use'],
      );
    });
  });

  it('anthropic codec - the SDK accepts the aggregated body from messages.create', async () => {
    const body = aggregate(script(false), false);
    await withServer({ status: 200, json: body }, async (client, bodies) => {
      const message = await client.messages.create(params);
      assert.deepEqual(message, body);
      assert.equal(decodeMessagesRequest(bodies[0]).request.stream, false);
    });
  });

  it('anthropic codec - an error frame mid-stream rejects with the SDK APIError of that type', async () => {
    const events = [
      ...script(false).slice(0, 4),
      { seq: 4, type: 'error', error: { code: 'no_worker', message: 'no worker for claude-x' } },
    ] as StreamEvent[];
    await withServer({ sse: events, thinking: false }, async (client) => {
      await assert.rejects(client.messages.stream(params).finalMessage(), (error: unknown) => {
        assert.ok(error instanceof Anthropic.APIError);
        assert.equal(error.type, 'overloaded_error');
        assert.match(error.message, /no worker for claude-x/);
        return true;
      });
    });
  });

  it('anthropic codec - an HTTP error body reads as the SDK error class and type', async () => {
    const json = anthropicError({ code: 'invalid_request', message: 'max_tokens: is required', param: 'max_tokens' });
    await withServer({ status: 400, json }, async (client) => {
      await assert.rejects(client.messages.create(params), (error: unknown) => {
        assert.ok(error instanceof Anthropic.BadRequestError);
        assert.equal(error.type, 'invalid_request_error');
        assert.equal(error.apiMessage, 'max_tokens: is required');
        return true;
      });
    });
  });
});
