/**
 * Acceptance by the official client: a local HTTP server answers the `openai` package with what the codec
 * produces. The client's own stream accumulator (`responses.stream().finalResponse()`) must rebuild the same
 * response the non-streaming aggregator returns, and what the client sends must decode.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import type { StreamEvent } from '@cortex/contracts';
import { withReplyServer, type CannedReply } from '../testing/reply-server.js';
import { decodeResponsesRequest } from './responses.decoder.js';
import { conversationMessages } from './responses.items.js';
import { openAiError } from '../openai/chat.encoder.js';
import type { ReasoningEventFamily } from './responses.resource.js';
import {
  aggregate,
  encodeAll,
  encoderOptions,
  scripts,
  sseText,
  toolCallTurns,
  toolResults,
  weatherTool,
} from './responses.fixtures.js';

type Reply = { status: number; json: unknown } | { sse: StreamEvent[]; family: ReasoningEventFamily };

/** Runs `run` against a server that records each request body and answers with `reply`. */
function withServer(reply: Reply, run: (client: OpenAI, bodies: unknown[]) => Promise<void>): Promise<void> {
  const canned: CannedReply =
    'json' in reply ? reply : { sse: sseText(encodeAll(reply.sse, encoderOptions(reply.family))) };
  return withReplyServer(
    canned,
    (base) => new OpenAI({ apiKey: 'test-key', baseURL: `${base}/v1`, maxRetries: 0 }),
    run,
  );
}

const params = {
  model: 'local-model',
  instructions: 'You are terse.',
  input: 'Weather in Paris?',
  tools: [{ ...weatherTool, type: 'function' as const, strict: null }],
};

/** What the client adds to every response it returns: parse results, all null without a parse helper. */
function withoutClientFields(response: object): Record<string, unknown> {
  const { output_parsed: _parsed, ...rest } = response as Record<string, unknown>;
  const output = (rest.output as Array<Record<string, unknown>>).map((item) => {
    const { parsed_arguments: _arguments, ...clean } = item;
    if (Array.isArray(clean.content) && clean.type === 'message') {
      clean.content = (clean.content as Array<Record<string, unknown>>).map(({ parsed: _p, ...part }) => part);
    }
    return clean;
  });
  return { ...rest, output };
}

describe('responses codec with the openai client', () => {
  it("responses codec - stream().finalResponse() rebuilds reasoning, text and function calls ('openai' family)", async () => {
    const events = scripts.toolCall;
    await withServer({ sse: events, family: 'openai' }, async (client, bodies) => {
      const texts: string[] = [];
      const reasoning: string[] = [];
      const stream = client.responses.stream(params);
      stream.on('response.output_text.delta', (event) => texts.push(event.delta));
      stream.on('response.reasoning_text.delta', (event) => reasoning.push(event.delta));
      const response = await stream.finalResponse();
      assert.deepEqual(texts, ['Let me check.']);
      assert.deepEqual(reasoning, ['Need the forecast.']);
      assert.equal(response.output_text, 'Let me check.');
      assert.equal(response.status, 'completed');
      assert.deepEqual(
        response.output.flatMap((item) =>
          item.type === 'function_call' ? [[item.call_id, item.name, JSON.parse(item.arguments)]] : [],
        ),
        [
          ['call_1', 'weather', { city: 'Paris' }],
          ['call_2', 'weather', { city: 'Lyon' }],
        ],
      );
      const thought = response.output[0];
      assert.ok(thought?.type === 'reasoning');
      assert.deepEqual(thought.content, [{ type: 'reasoning_text', text: 'Need the forecast.' }]);
      // Streaming and non-streaming give the same response.
      assert.deepEqual(withoutClientFields(response), aggregate(events));

      // The request the client sent decodes.
      const decoded = decodeResponsesRequest(bodies[0]);
      assert.equal(decoded.request.stream, true);
      assert.deepEqual(decoded.request.messages, [
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'Weather in Paris?' },
      ]);
      assert.deepEqual(
        decoded.request.tools?.map((tool) => tool.name),
        ['weather'],
      );
    });
  });

  it('responses codec - create() accepts the aggregated body, and its output goes back as the next input', async () => {
    const body = aggregate(scripts.toolCall);
    await withServer({ status: 200, json: body }, async (client, bodies) => {
      const response = await client.responses.create(params);
      assert.equal(response.output_text, 'Let me check.');
      assert.deepEqual(response, body);
      assert.equal(decodeResponsesRequest(bodies[0]).request.stream, false);

      // Manual state: the client sends the whole output back with the tool results, as the OpenAI guide does.
      await client.responses.create({
        ...params,
        input: [{ role: 'user', content: 'Weather in Paris?' }, ...response.output, ...toolResults],
      });
      const next = decodeResponsesRequest(bodies[1]);
      assert.deepEqual(conversationMessages(next.instructions, next.input), next.request.messages);
      assert.deepEqual(next.request.messages.slice(1), toolCallTurns);
    });
  });

  it('responses codec - a plain text stream and an incomplete one', async () => {
    await withServer({ sse: scripts.text, family: 'openai' }, async (client) => {
      const response = await client.responses.stream(params).finalResponse();
      assert.equal(response.output_text, 'Hello, world.');
      assert.equal(response.usage?.total_tokens, 21);
    });
    await withServer({ sse: scripts.incomplete, family: 'openai' }, async (client) => {
      const response = await client.responses.stream({ ...params, max_output_tokens: 16 }).finalResponse();
      assert.equal(response.status, 'incomplete');
      assert.deepEqual(response.incomplete_details, { reason: 'max_output_tokens' });
      assert.equal(response.output_text, 'A long ans');
    });
  });

  it("responses codec - the client rejects the spec's reasoning events ('openresponses' family)", async () => {
    await withServer({ sse: scripts.reasoning, family: 'openresponses' }, async (client) => {
      await assert.rejects(client.responses.stream(params).finalResponse(), (error: unknown) => {
        assert.ok(error instanceof OpenAI.OpenAIError);
        assert.match(error.message, /Unhandled response stream event: .*response\.reasoning\.delta/);
        return true;
      });
    });
    // Without reasoning in the stream, both families are the same frames and the client accepts them.
    await withServer({ sse: scripts.text, family: 'openresponses' }, async (client) => {
      assert.equal((await client.responses.stream(params).finalResponse()).output_text, 'Hello, world.');
    });
  });

  it('responses codec - an error frame mid-stream rejects with an APIError carrying code and message', async () => {
    await withServer({ sse: scripts.error, family: 'openai' }, async (client) => {
      await assert.rejects(client.responses.stream(params).finalResponse(), (error: unknown) => {
        assert.ok(error instanceof OpenAI.APIError);
        assert.equal(error.code, 'worker_lost');
        assert.equal(error.type, 'api_error');
        assert.match(error.message, /the worker went away/);
        return true;
      });
    });
  });

  it(
    'responses codec - an HTTP error body (the OpenAI envelope the ' +
      'gateway sends) reads as the client error class with code and param',
    async () => {
      const json = openAiError({
        code: 'invalid_request',
        message: 'background: background responses must be stored',
        param: 'background',
      });
      await withServer({ status: 400, json }, async (client) => {
        await assert.rejects(
          client.responses.create({ ...params, background: true, store: false }),
          (error: unknown) => {
            assert.ok(error instanceof OpenAI.BadRequestError);
            assert.equal(error.code, 'invalid_request');
            assert.equal(error.param, 'background');
            assert.equal(error.type, 'invalid_request_error');
            return true;
          },
        );
      });
    },
  );
});
