import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_OUTPUT_CAP, reservationBound, reservationFor } from './reservation.js';

describe('budget reservation', () => {
  const cases: Array<[string, string, unknown, number, number | undefined, number]> = [
    ['chat with max_tokens', '/v1/chat/completions', { max_tokens: 50 }, 100, 512, 150],
    ['chat with max_completion_tokens', '/v1/chat/completions', { max_completion_tokens: 20 }, 100, 512, 120],
    ['responses with max_output_tokens', '/v1/responses', { max_output_tokens: 30 }, 80, 512, 110],
    ['no cap: the model context', '/v1/messages', {}, 80, 512, 592],
    ['no cap, no context known', '/v1/chat/completions', {}, 80, undefined, 80 + DEFAULT_OUTPUT_CAP],
    ['n choices', '/v1/chat/completions', { max_tokens: 10, n: 3 }, 100, 512, 130],
    ['several legacy prompts', '/v1/completions', { max_tokens: 10, prompt: ['a', 'b'] }, 100, 512, 120],
    ['token ids are one prompt', '/v1/completions', { max_tokens: 10, prompt: [1, 2, 3] }, 100, 512, 110],
    ['embeddings: no output', '/v1/embeddings', { input: 'x' }, 40, 512, 40],
    ['count_tokens: no output', '/v1/messages/count_tokens', {}, 40, 512, 40],
  ];
  for (const [what, path, body, bytes, context, expected] of cases) {
    it(`reservation - ${what}: ${expected}`, () => assert.equal(reservationFor(path, body, bytes, context), expected));
  }

  it('reservation - the bound in its parts, as a money budget prices them: the body bounds the prompt, the cap the output', () => {
    assert.deepEqual(reservationBound('/v1/chat/completions', { max_tokens: 50, n: 2 }, 100, 512), {
      prompt: 100,
      output: 100,
    });
    assert.deepEqual(reservationBound('/v1/embeddings', { input: 'x' }, 40, 512), { prompt: 40, output: 0 });
    assert.deepEqual(reservationBound('/v1/messages', {}, 0, undefined), { prompt: 1, output: DEFAULT_OUTPUT_CAP });
  });
});
