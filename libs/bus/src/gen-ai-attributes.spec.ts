import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { CanonicalRequest } from '@cortex/contracts';
import {
  genAiInputMessages,
  genAiOperation,
  genAiOutputMessages,
  genAiRequestAttributes,
  genAiResponseAttributes,
} from './gen-ai-attributes.js';

const request: CanonicalRequest = {
  model: 'm',
  messages: [{ role: 'user', content: 'secret words' }],
  sampling: {},
  stream: true,
} as unknown as CanonicalRequest;

describe('gen_ai attributes', () => {
  const operations: Array<[Parameters<typeof genAiOperation>[0], Parameters<typeof genAiOperation>[1], string]> = [
    ['openai.chat', undefined, 'chat'],
    ['anthropic.messages', undefined, 'chat'],
    ['openai.responses', undefined, 'chat'],
    ['openai.completions', undefined, 'text_completion'],
    ['openai.chat', { raw: { text: 'x' } }, 'text_completion'],
    ['openai.embeddings', undefined, 'embeddings'],
    ['rerank', undefined, 'rerank'],
  ];
  for (const [api, body, operation] of operations) {
    it(`gen_ai attributes - ${api}${body ? ' with a raw prompt' : ''} is the operation ${operation}`, () =>
      assert.equal(genAiOperation(api, body), operation));
  }

  it('gen_ai attributes - the request: model, stream and only the sampling it set; never message contents', () => {
    assert.deepEqual(genAiRequestAttributes('chat', request), {
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': 'cortex',
      'gen_ai.request.model': 'm',
      'gen_ai.request.stream': true,
      'gen_ai.output.type': 'text',
    });
    const sampled = genAiRequestAttributes('chat', {
      ...request,
      sampling: {
        maxTokens: 64,
        temperature: 0,
        topP: 0.9,
        topK: 40,
        seed: 7,
        stop: ['\n'],
        presencePenalty: 1,
        frequencyPenalty: -1,
      },
      responseFormat: { type: 'json_object' },
    });
    assert.equal(sampled['gen_ai.request.max_tokens'], 64);
    assert.equal(sampled['gen_ai.request.temperature'], 0, 'a zero is set, not dropped');
    assert.equal(sampled['gen_ai.request.top_p'], 0.9);
    assert.equal(sampled['gen_ai.request.top_k'], 40);
    assert.equal(sampled['gen_ai.request.seed'], 7);
    assert.deepEqual(sampled['gen_ai.request.stop_sequences'], ['\n']);
    assert.equal(sampled['gen_ai.request.presence_penalty'], 1);
    assert.equal(sampled['gen_ai.request.frequency_penalty'], -1);
    assert.equal(sampled['gen_ai.output.type'], 'json');
    assert.ok(!JSON.stringify(sampled).includes('secret words'));
  });

  it('gen_ai attributes - the response: model, all four token counts and the finish reason', () => {
    assert.deepEqual(
      genAiResponseAttributes(
        'm-q4',
        { promptTokens: 12, cachedPromptTokens: 8, completionTokens: 6, reasoningTokens: 2 },
        'length',
      ),
      {
        'gen_ai.response.model': 'm-q4',
        'gen_ai.response.finish_reasons': ['length'],
        'gen_ai.usage.input_tokens': 12,
        'gen_ai.usage.output_tokens': 6,
        'gen_ai.usage.cache_read.input_tokens': 8,
        'gen_ai.usage.reasoning.output_tokens': 2,
      },
    );
    assert.deepEqual(
      genAiResponseAttributes('m', null, null),
      { 'gen_ai.response.model': 'm' },
      'a request that failed before any usage',
    );
  });

  it("gen_ai attributes - messages in the conventions' shape: text, reasoning, tool calls and their results", () => {
    const input = genAiInputMessages([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Weather in Paris?' },
      {
        role: 'assistant',
        content: '',
        reasoning: 'look it up',
        toolCalls: [{ id: 'c1', name: 'get_weather', arguments: '{"city":"Paris"}' }],
      },
      { role: 'tool', content: '18 C', toolCallId: 'c1' },
    ]);
    assert.deepEqual(JSON.parse(input), [
      { role: 'system', parts: [{ type: 'text', content: 'Be brief.' }] },
      { role: 'user', parts: [{ type: 'text', content: 'Weather in Paris?' }] },
      {
        role: 'assistant',
        parts: [
          { type: 'reasoning', content: 'look it up' },
          { type: 'tool_call', id: 'c1', name: 'get_weather', arguments: '{"city":"Paris"}' },
        ],
      },
      { role: 'tool', parts: [{ type: 'tool_call_response', id: 'c1', response: '18 C' }] },
    ]);
    const output = genAiOutputMessages({ text: 'It is 18 C.', reasoning: 'easy', toolCalls: [] }, 'stop');
    assert.deepEqual(JSON.parse(output), [
      {
        role: 'assistant',
        parts: [
          { type: 'reasoning', content: 'easy' },
          { type: 'text', content: 'It is 18 C.' },
        ],
        finish_reason: 'stop',
      },
    ]);
  });
});
