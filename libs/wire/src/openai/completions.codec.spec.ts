import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError, type StreamEvent } from '@cortex/contracts';
import { completionChoices, completionPrompts, decodeCompletionRequest } from './completions.decoder.js';
import { CompletionAggregator, CompletionChunkEncoder } from './completions.encoder.js';

function invalid(body: unknown, param: string): void {
  assert.throws(
    () => decodeCompletionRequest(body),
    (error: Error) => error instanceof CortexError && error.code === 'invalid_request' && error.extra.param === param,
    `expected invalid_request on ${param}`,
  );
}

const timings = { ttftMs: 1, promptMs: 1, decodeTokensPerSecond: 100, durationMs: 10, queueMs: 0 };
const finish = (completionTokens: number, extra: Record<string, number> = {}): StreamEvent => ({
  seq: 9,
  type: 'finish',
  reason: 'stop',
  usage: { promptTokens: 2, cachedPromptTokens: 0, completionTokens, reasoningTokens: 0, ...extra },
  timings,
});

describe('openai completions codec', () => {
  it('openai completions codec - a raw prompt with suffix, echo and sampling; max_tokens defaults to 16', () => {
    const request = decodeCompletionRequest({
      model: 'm',
      prompt: 'def f(',
      suffix: ')',
      echo: true,
      temperature: 0,
      stop: '\n',
      stream: true,
      stream_options: { include_usage: true },
    });
    assert.deepEqual(request.raw, { text: 'def f(', suffix: ')', echo: true });
    assert.deepEqual(request.messages, []);
    assert.deepEqual(request.sampling, { temperature: 0, maxTokens: 16, stop: ['\n'] });
    assert.equal(request.includeUsage, true);
    assert.deepEqual(decodeCompletionRequest({ model: 'm', prompt: [5, 6] }).raw, { tokens: [5, 6] });
    assert.deepEqual(decodeCompletionRequest({ model: 'm', prompt: ['only'], suffix: '' }).raw, { text: 'only' });
  });

  it('openai completions codec - prompts: a string, token ids, or an array of either', () => {
    assert.deepEqual(completionPrompts('a'), ['a']);
    assert.deepEqual(completionPrompts([1, 2]), [[1, 2]]);
    assert.deepEqual(completionPrompts(['a', [1]]), ['a', [1]]);
    assert.deepEqual(completionChoices({ prompt: ['a', 'b'], n: 2 }), ['a', 'a', 'b', 'b']);
  });

  it('openai completions codec - refuses what it does not serve, naming the field', () => {
    invalid({ model: 'm' }, 'prompt');
    invalid({ model: 'm', prompt: [] }, 'prompt');
    invalid({ model: 'm', prompt: ['a', 'b'] }, 'prompt');
    invalid({ model: 'm', prompt: [-1] }, 'prompt[0]');
    invalid({ model: 'm', prompt: ['a', 3] }, 'prompt[1]');
    invalid({ model: 'm', prompt: 'a', n: 3 }, 'n');
    invalid({ model: 'm', prompt: 'a', n: 0 }, 'n');
    invalid({ model: 'm', prompt: ['a', 'b'], n: 9 }, 'n');
    invalid({ model: 'm', prompt: 'a', best_of: 2 }, 'best_of');
    invalid({ model: 'm', prompt: 'a', logprobs: 21 }, 'logprobs');
    invalid({ model: 'm', prompt: 'a', logprobs: 2, echo: true, suffix: 'b' }, 'suffix');
    invalid({ model: 'm', prompt: 'a', max_tokens: 0 }, 'max_tokens');
    invalid({ model: 'm', prompt: 'a', suffix: 4 }, 'suffix');
    invalid({ model: 'm', prompt: 'a', stream_options: {} }, 'stream_options');
  });

  it('openai completions codec - chunks carry each choice index; usage adds up and follows the last finish', () => {
    const encoder = new CompletionChunkEncoder({
      id: 'cmpl-1',
      model: 'm',
      created: 1,
      includeUsage: true,
      choices: 2,
    });
    const first = encoder.encode({ seq: 1, type: 'text', text: 'Hi' }, 1);
    assert.deepEqual((first[0]?.choices as unknown[])[0], {
      index: 1,
      text: 'Hi',
      logprobs: null,
      finish_reason: null,
    });
    assert.equal(first[0]?.object, 'text_completion');
    assert.equal(encoder.encode(finish(3), 1).length, 1, 'no usage before every choice has finished');
    const last = encoder.encode(finish(4, { draftTokens: 5, acceptedDraftTokens: 2 }), 0);
    assert.deepEqual(last[1]?.usage, {
      prompt_tokens: 4,
      completion_tokens: 7,
      total_tokens: 11,
      completion_tokens_details: { accepted_prediction_tokens: 2, rejected_prediction_tokens: 3 },
    });
    assert.deepEqual(last[1]?.choices, []);
  });

  it(
    "openai completions codec - logprobs in this API's shape: tokens, " +
      "their logprobs, the likeliest as a map, offsets in the choice's text",
    () => {
      assert.equal(decodeCompletionRequest({ model: 'm', prompt: 'a', logprobs: 0 }).logprobs, 0);
      assert.equal(decodeCompletionRequest({ model: 'm', prompt: 'a', logprobs: 3 }).logprobs, 3);
      assert.equal(
        decodeCompletionRequest({ model: 'm', prompt: 'a', logprobs: 1, echo: true, max_tokens: 0 }).sampling.maxTokens,
        0,
        'max_tokens 0 with echo: the prompt alone',
      );
      const entry = (token: string, logprob: number) => ({
        token,
        logprob,
        bytes: [],
        top: [
          { token, logprob, bytes: [] },
          { token: 'x', logprob: -5, bytes: [] },
        ],
      });
      const encoder = new CompletionChunkEncoder({
        id: 'cmpl-1',
        model: 'm',
        created: 1,
        includeUsage: false,
        choices: 1,
        logprobs: true,
      });
      encoder.encode({ seq: 1, type: 'text', text: 'He', logprobs: [entry('He', -0.5)] });
      const second = encoder.encode({
        seq: 2,
        type: 'text',
        text: 'llo',
        logprobs: [entry('l', -0.1), entry('lo', -0.2)],
      });
      assert.deepEqual((second[0]?.choices as Array<{ logprobs: unknown }>)[0]?.logprobs, {
        tokens: ['l', 'lo'],
        token_logprobs: [-0.1, -0.2],
        top_logprobs: [
          { l: -0.1, x: -5 },
          { lo: -0.2, x: -5 },
        ],
        text_offset: [2, 3],
      });
      const body = new CompletionAggregator({ id: 'cmpl-1', model: 'm', created: 1, choices: 1, logprobs: true });
      body.add({ seq: 1, type: 'text', text: 'He', logprobs: [entry('He', -0.5)] });
      body.add({ seq: 2, type: 'text', text: 'llo', logprobs: [entry('llo', -0.1)] });
      const choice = (body.body().choices as Array<{ logprobs: { tokens: string[]; text_offset: number[] } }>)[0];
      assert.deepEqual(choice?.logprobs.tokens, ['He', 'llo']);
      assert.deepEqual(choice?.logprobs.text_offset, [0, 2]);
    },
  );

  it('openai completions codec - the body has one choice per prompt in order', () => {
    const body = new CompletionAggregator({ id: 'cmpl-1', model: 'm', created: 1, choices: 2 });
    body.add({ seq: 1, type: 'text', text: 'b' }, 1);
    body.add({ seq: 1, type: 'text', text: 'a' }, 0);
    body.add({ seq: 2, type: 'reasoning', text: 'hidden' }, 0);
    body.add(finish(1), 0);
    body.add({ ...finish(1), reason: 'length' } as StreamEvent, 1);
    const { choices, usage } = body.body() as {
      choices: Array<{ text: string; finish_reason: string }>;
      usage: Record<string, unknown>;
    };
    assert.deepEqual(
      choices.map((c) => [c.text, c.finish_reason]),
      [
        ['a', 'stop'],
        ['b', 'length'],
      ],
    );
    assert.deepEqual(usage, { prompt_tokens: 4, completion_tokens: 2, total_tokens: 6 });
  });
});
