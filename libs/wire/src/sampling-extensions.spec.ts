import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError, type Sampling } from '@cortex/contracts';
import { decodeChatRequest } from './openai/chat.decoder.js';
import { decodeCompletionRequest } from './openai/completions.decoder.js';
import { decodeResponsesRequest } from './responses/responses.decoder.js';
import { samplingExtensions } from './sampling-extensions.js';

const named = (param: string) => (error: Error) =>
  error instanceof CortexError && error.code === 'invalid_request' && error.extra.param === param;

describe('sampling extensions', () => {
  it(
    'sampling extensions - top_k, min_p, repetition_penalty (or ' +
      'repeat_penalty) and repeat_last_n reach the sampling; the ' +
      'values that mean "off" are kept, to win over the model\'s defaults',
    () => {
      assert.deepEqual(samplingExtensions({ top_k: 20, min_p: 0.05, repetition_penalty: 1.1, repeat_last_n: 128 }), {
        topK: 20,
        minP: 0.05,
        repetitionPenalty: 1.1,
        repeatLastN: 128,
      });
      assert.deepEqual(samplingExtensions({ repeat_penalty: 1.3 }), { repetitionPenalty: 1.3 });
      assert.deepEqual(samplingExtensions({ top_k: -1, repetition_penalty: 1, min_p: null }), {
        topK: 0,
        repetitionPenalty: 1,
      });
      assert.deepEqual(samplingExtensions({ top_k: 0 }), { topK: 0 });
      assert.deepEqual(samplingExtensions({}), {});
    },
  );

  it(
    "sampling extensions - XTC and DRY by llama.cpp's names, with its " +
      'defaults; 0 (its default) is off; bad values are 400s naming the field',
    () => {
      assert.deepEqual(samplingExtensions({ xtc_probability: 0.5 }), { xtc: { probability: 0.5, threshold: 0.1 } });
      assert.deepEqual(samplingExtensions({ xtc_probability: 0.5, xtc_threshold: 0.2 }), {
        xtc: { probability: 0.5, threshold: 0.2 },
      });
      assert.deepEqual(samplingExtensions({ xtc_probability: 0, xtc_threshold: 0.2, dry_multiplier: 0 }), {});
      assert.deepEqual(samplingExtensions({ dry_multiplier: 0.8 }), { dry: { multiplier: 0.8 } });
      assert.deepEqual(
        samplingExtensions({
          dry_multiplier: 0.8,
          dry_base: 2,
          dry_allowed_length: 3,
          dry_penalty_last_n: -1,
          dry_sequence_breakers: ['\n'],
        }),
        { dry: { multiplier: 0.8, base: 2, allowedLength: 3, sequenceBreakers: ['\n'] } },
      );
      assert.deepEqual(samplingExtensions({ dry_multiplier: 0.8, dry_penalty_last_n: 256 }), {
        dry: { multiplier: 0.8, lastN: 256 },
      });
      assert.throws(() => samplingExtensions({ xtc_probability: 2 }), named('xtc_probability'));
      assert.throws(() => samplingExtensions({ dry_base: 0.5 }), named('dry_base'));
      assert.throws(() => samplingExtensions({ dry_penalty_last_n: -2 }), named('dry_penalty_last_n'));
      assert.throws(() => samplingExtensions({ dry_sequence_breakers: [''] }), named('dry_sequence_breakers[0]'));
      assert.throws(() => samplingExtensions({ dry_sequence_breakers: 'x' }), named('dry_sequence_breakers'));
    },
  );

  it('sampling extensions - logit_bias maps token ids to a bias from -100 to 100; an empty map is none', () => {
    assert.deepEqual(samplingExtensions({ logit_bias: { '0': -100, '1500': 2.5 } }), {
      logitBias: { '0': -100, '1500': 2.5 },
    });
    assert.deepEqual(samplingExtensions({ logit_bias: {} }), {});
    assert.deepEqual(samplingExtensions({ logit_bias: null }), {});
    assert.throws(() => samplingExtensions({ logit_bias: { hello: 1 } }), named('logit_bias'));
    assert.throws(() => samplingExtensions({ logit_bias: { '-1': 1 } }), named('logit_bias'));
    assert.throws(() => samplingExtensions({ logit_bias: { '12': 101 } }), named('logit_bias.12'));
    assert.throws(() => samplingExtensions({ logit_bias: { '12': 'up' } }), named('logit_bias.12'));
    assert.throws(() => samplingExtensions({ logit_bias: [1, 2] }), named('logit_bias'));
    assert.throws(
      () =>
        samplingExtensions({ logit_bias: Object.fromEntries(Array.from({ length: 1025 }, (_, i) => [String(i), 1])) }),
      named('logit_bias'),
    );
  });

  it('sampling extensions - each bad value is a 400 naming its field', () => {
    assert.throws(() => samplingExtensions({ top_k: 1.5 }), named('top_k'));
    assert.throws(() => samplingExtensions({ top_k: -2 }), named('top_k'));
    assert.throws(() => samplingExtensions({ min_p: 1.5 }), named('min_p'));
    assert.throws(() => samplingExtensions({ repetition_penalty: 0 }), named('repetition_penalty'));
    assert.throws(() => samplingExtensions({ repeat_penalty: 'high' }), named('repeat_penalty'));
    assert.throws(() => samplingExtensions({ repeat_last_n: -1 }), named('repeat_last_n'));
    assert.throws(() => samplingExtensions({ typical_p: 0.9 }), named('typical_p'));
    assert.throws(() => samplingExtensions({ mirostat: 2 }), named('mirostat'));
  });

  it('sampling extensions - Chat Completions asks for logprobs with logprobs: true and up to 20 top_logprobs, which need it', () => {
    const chat = { model: 'm', messages: [{ role: 'user', content: 'Hi.' }] };
    assert.equal(decodeChatRequest({ ...chat, logprobs: true }).logprobs, 0);
    assert.equal(decodeChatRequest({ ...chat, logprobs: true, top_logprobs: 5 }).logprobs, 5);
    assert.equal(decodeChatRequest({ ...chat, logprobs: false }).logprobs, undefined);
    assert.throws(() => decodeChatRequest({ ...chat, top_logprobs: 2 }), named('top_logprobs'));
    assert.throws(() => decodeChatRequest({ ...chat, logprobs: true, top_logprobs: 21 }), named('top_logprobs'));
    assert.throws(() => decodeChatRequest({ ...chat, logprobs: 'yes' }), named('logprobs'));
  });

  it('sampling extensions - Chat Completions, legacy completions and Responses all carry them', () => {
    const body = { model: 'm', top_k: 20, min_p: 0.1, repetition_penalty: 1.2 };
    const expected = { topK: 20, minP: 0.1, repetitionPenalty: 1.2 };
    const pick = (sampling: Sampling) => ({
      topK: sampling.topK,
      minP: sampling.minP,
      repetitionPenalty: sampling.repetitionPenalty,
    });
    assert.deepEqual(
      pick(decodeChatRequest({ ...body, messages: [{ role: 'user', content: 'Hi.' }] }).sampling),
      expected,
    );
    assert.deepEqual(pick(decodeCompletionRequest({ ...body, prompt: 'Hi.' }).sampling), expected);
    assert.deepEqual(pick(decodeResponsesRequest({ ...body, input: 'Hi.' }).request.sampling), expected);
  });
});
