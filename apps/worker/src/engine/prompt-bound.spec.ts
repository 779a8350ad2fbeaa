import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { CortexError, type CanonicalRequest } from '@cortex/contracts';
import { ensureFixtureModels } from '@cortex/fixtures';
import { LlamaEngine } from './llama-engine.js';
import { hasLongRun, promptTooLong } from './prompt-bound.js';

const chat = (content: string, tools?: CanonicalRequest['tools']): CanonicalRequest => ({
  model: 'm',
  messages: [{ role: 'user', content }],
  sampling: {},
  stream: false,
  ...(tools && { tools }),
});

describe('prompt bound', () => {
  it("prompt bound - a prompt too long for the context is a 400 naming the field: a count's lower bound and the images said", () => {
    const cases: Array<[string, Parameters<typeof promptTooLong>[0], string]> = [
      [
        'counted whole',
        { model: 'm', tokens: 600, contextSize: 512, param: 'messages' },
        'the prompt is 600 tokens but m has a context of 512; shorten the messages',
      ],
      [
        'a lower bound, raw',
        { model: 'm', tokens: 530, contextSize: 512, param: 'prompt', atLeast: true },
        'the prompt is at least 530 tokens but m has a context of 512; shorten the prompt',
      ],
      [
        'images counted',
        { model: 'v', tokens: 300, contextSize: 256, param: 'messages', images: true },
        'the prompt is 300 tokens (images included) but v has a context of 256; shorten the messages or send fewer images',
      ],
    ];
    for (const [name, prompt, message] of cases) {
      const error = promptTooLong(prompt);
      assert.deepEqual(
        [error.code, error.message, error.extra.param],
        ['invalid_request', message, prompt.param],
        name,
      );
    }
  });

  it('prompt bound - a run of over 4,096 characters without white space is found in any text of the prompt', () => {
    const cases: Array<[string, CanonicalRequest, boolean]> = [
      ['short', chat('a'.repeat(4_096)), false],
      ['one character', chat('a'.repeat(4_097)), true],
      ['words', chat('the quick brown fox '.repeat(10_000)), false],
      ['a base64 blob inside prose', chat(`look at this: ${'QUJD'.repeat(1_100)} and tell me`), true],
      ['runs broken by newlines', chat(`${'a'.repeat(4_000)}\n`.repeat(10)), false],
      [
        'in a tool schema',
        chat('hi', [{ name: 't', parameters: { type: 'object', description: 'x'.repeat(5_000) } }]),
        true,
      ],
      ['in a raw prompt', { ...chat(''), messages: [], raw: { text: 'z'.repeat(9_000) } } as CanonicalRequest, true],
    ];
    for (const [name, request, long] of cases) assert.equal(hasLongRun(request), long, name);
  });

  it(
    'prompt bound - a long run under the bytes bound is counted in ' +
      'chunks and refused past the context; words are tokenized whole',
    async () => {
      const dir = await mkdtemp(join(tmpdir(), 'cortex-prompt-bound-'));
      const engine = await LlamaEngine.create({ gpu: 'cpu', threads: 1, log: () => undefined });
      try {
        const path = (await ensureFixtureModels(dir))['cortex-chat'] as string;
        const model = await engine.load({ id: 'cortex-chat', path, contextSize: 8_192, slots: 1, maxQueue: 1 });
        const refusal = async (content: string): Promise<string> => {
          const error = await model
            .generate({
              request: { ...chat(content), model: 'cortex-chat' },
              receivedAt: performance.now(),
              signal: new AbortController().signal,
              emit: () => undefined,
            })
            .then(
              () => assert.fail('a prompt over the context must be refused'),
              (thrown: unknown) => thrown,
            );
          assert.ok(error instanceof CortexError && error.code === 'invalid_request', String(error));
          return error.message;
        };
        // 30,000 bytes: under 4 bytes per token of the context, where a prompt used to be tokenized whole.
        assert.match(
          await refusal('a'.repeat(30_000)),
          /^the prompt is at least \d+ tokens but cortex-chat has a context of 8192/,
        );
        assert.match(
          await refusal('the quick brown fox '.repeat(1_500)),
          /^the prompt is \d+ tokens but cortex-chat has a context of 8192/,
        );
        // An image that reached a text engine is refused, in counting and in generation alike.
        const withImage: CanonicalRequest = {
          ...chat('what is this?'),
          model: 'cortex-chat',
          messages: [
            {
              role: 'user',
              content: 'what is this?',
              images: [{ at: 0, part: 'messages[0].content[0]', data: 'iVBOR', mediaType: 'image/png' }],
            },
          ],
        };
        assert.throws(
          () => model.countTokens(withImage),
          /^CortexError: messages\[0\]\.content\[0\]: model cortex-chat takes text only/,
        );
        await assert.rejects(
          model.generate({
            request: withImage,
            receivedAt: performance.now(),
            signal: new AbortController().signal,
            emit: () => undefined,
          }),
          (error: unknown) => error instanceof CortexError && error.extra.param === 'messages[0].content[0]',
        );
        await model.dispose();
      } finally {
        await engine.dispose();
        await rm(dir, { recursive: true, force: true });
      }
    },
  );
});
