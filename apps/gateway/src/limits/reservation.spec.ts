import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_OUTPUT_CAP, reservationBound, reservationFor } from './reservation.js';

/** The UTF-8 bytes of a body as a client sends it (its shortest JSON). */
const bytes = (body: unknown): number => Buffer.byteLength(JSON.stringify(body));

describe('budget reservation', () => {
  const cases: Array<[string, string, unknown, number, number | undefined, number]> = [
    ['chat with max_tokens', '/v1/chat/completions', { max_tokens: 50 }, 100, 512, 150],
    ['chat with max_completion_tokens', '/v1/chat/completions', { max_completion_tokens: 20 }, 100, 512, 120],
    ['responses with max_output_tokens', '/v1/responses', { max_output_tokens: 30 }, 80, 512, 110],
    ['no cap: the model context', '/v1/messages', {}, 80, 512, 592],
    ['no cap, no context known', '/v1/chat/completions', {}, 80, undefined, 80 + DEFAULT_OUTPUT_CAP],
    ['n choices: each evaluates the whole prompt', '/v1/chat/completions', { max_tokens: 10, n: 3 }, 100, 512, 330],
    ['n 16, no cap: 16 prompts and 16 contexts', '/chat/completions', { n: 16 }, 100, 512, 16 * 612],
    [
      'n past what chat allows counts one (the decoder refuses it)',
      '/v1/chat/completions',
      { max_tokens: 10, n: 17 },
      100,
      512,
      110,
    ],
    ['n 1', '/v1/chat/completions', { max_tokens: 10, n: 1 }, 100, 512, 110],
    ['n not an integer counts one', '/v1/chat/completions', { max_tokens: 10, n: 2.5 }, 100, 512, 110],
    ['legacy n: the prompt each time', '/v1/completions', { max_tokens: 10, prompt: 'a', n: 4 }, 100, 512, 440],
    ['token ids are one prompt', '/v1/completions', { max_tokens: 10, prompt: [1, 2, 3] }, 100, 512, 110],
    ['token ids with n', '/v1/completions', { max_tokens: 10, prompt: [1, 2, 3], n: 2 }, 100, 512, 220],
    [
      'legacy choices past 16: n counts one (the decoder refuses it)',
      '/v1/completions',
      { max_tokens: 10, prompt: ['a', 'b'], n: 9 },
      100,
      512,
      2 * (3 + 94) + 2 * 10,
    ],
    ['embeddings: no output, the body bounds every input', '/v1/embeddings', { input: ['x', 'y'] }, 40, 512, 40],
    ['count_tokens: no output', '/v1/messages/count_tokens', {}, 40, 512, 40],
    ['not an object: its bytes and the context', '/v1/chat/completions', 'text', 10, 512, 522],
  ];
  for (const [what, path, body, size, context, expected] of cases) {
    it(`reservation - ${what}: ${expected}`, () => assert.equal(reservationFor(path, body, size, context), expected));
  }

  it('reservation - a list of legacy prompts: each prompt with the rest of the body, times its choices, and each choice its cap', () => {
    const body = { model: 'cortex-chat', prompt: ['short', 'a longer prompt here'], max_tokens: 10, n: 2 };
    const whole = bytes(body);
    // What is not a prompt: the body less both prompts' JSON ("short" is 7 bytes, the other 22).
    const rest = whole - 7 - 22;
    assert.deepEqual(reservationBound('/v1/completions', body, whole, 512), {
      prompt: 2 * (7 + rest) + 2 * (22 + rest),
      output: 4 * 10,
    });
    // Each prompt's bound covers its own request: the same body with that prompt alone.
    const alone = bytes({ ...body, prompt: 'a longer prompt here' });
    assert.ok(22 + rest >= alone, `${22 + rest} ≥ ${alone}`);
  });

  it('reservation - 16 prompts: each its own prompt and cap, far less than 16 whole bodies', () => {
    const prompts = Array.from({ length: 16 }, (_, i) => `Prompt number ${i}.`);
    const body = { model: 'cortex-chat', prompt: prompts, max_tokens: 5 };
    const whole = bytes(body);
    const bound = reservationBound('/v1/completions', body, whole, 512);
    const sizes = prompts.map((p) => bytes(p));
    const rest = whole - sizes.reduce((a, b) => a + b, 0);
    assert.deepEqual(bound, { prompt: sizes.reduce((sum, size) => sum + size + rest, 0), output: 16 * 5 });
    assert.ok(bound.prompt < 16 * whole);
    // Every prompt's run alone is bounded by its share.
    for (const [i, prompt] of prompts.entries())
      assert.ok((sizes[i] as number) + rest >= bytes({ ...body, prompt }), prompt);
  });

  it('reservation - prompts as lists of token ids and escaped text: their JSON never exceeds their bytes in the body', () => {
    const body = { prompt: [[1, 2, 3], 'quote " and \\ and é and \n'], max_tokens: 1 };
    const sent = '{ "prompt" : [ [1, 2, 3], "quote \\" and \\\\ and \\u00e9 and \\n" ], "max_tokens": 1 }';
    const bound = reservationBound('/completions', body, Buffer.byteLength(sent), undefined);
    // The rest is over-counted by the client's spaces and escapes, never under.
    const rest = Buffer.byteLength(sent) - bytes([1, 2, 3]) - bytes(body.prompt[1]);
    assert.ok(rest >= bytes({ prompt: [], max_tokens: 1 }) - 2);
    assert.deepEqual(bound, { prompt: bytes([1, 2, 3]) + bytes(body.prompt[1]) + 2 * rest, output: 2 });
  });

  it('reservation - a rerank scores each document with the query: the query once per document', () => {
    const body = { model: 'r', query: 'which is about cats?', documents: ['dogs bark', { text: 'cats purr' }, 'fish'] };
    const whole = bytes(body);
    const sizes = body.documents.map((d) => bytes(d));
    const rest = whole - sizes.reduce((a, b) => a + b, 0);
    assert.deepEqual(reservationBound('/v1/rerank', body, whole, 512), {
      prompt: sizes.reduce((sum, size) => sum + size + rest, 0),
      output: 0,
    });
    assert.ok(rest > Buffer.byteLength(body.query), 'the query is in every document’s share');
    assert.deepEqual(reservationBound('/rerank', { query: 'q', documents: ['one'] }, 30, 512), {
      prompt: 30,
      output: 0,
    });
  });

  it('reservation - the bound in its parts, as a money budget prices them: the body bounds the prompt, the cap the output', () => {
    assert.deepEqual(reservationBound('/v1/chat/completions', { max_tokens: 50, n: 2 }, 100, 512), {
      prompt: 200,
      output: 100,
    });
    assert.deepEqual(reservationBound('/v1/embeddings', { input: 'x' }, 40, 512), { prompt: 40, output: 0 });
    assert.deepEqual(reservationBound('/v1/messages', {}, 0, undefined), { prompt: 1, output: DEFAULT_OUTPUT_CAP });
  });
});
