import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { fixtureChainTokens, fixtureModel } from '@cortex/fixtures';
import {
  postJson,
  postSse,
  startStack,
  waitFor,
  FIXTURE_CATALOGUE,
  STORIES_260K,
  type TestStack,
} from '@cortex/testing';

const chat = fixtureModel('cortex-chat');
const fim = fixtureModel('cortex-fim');
const loop = fixtureModel('cortex-loop');
const code = 'def greet():\n    return ';

/** A byte token's id in the fixture vocabulary (`<unk>`, `<s>`, `</s>`, then the 256 bytes). */
const byteToken = (char: string): number => 3 + char.charCodeAt(0);

type Usage = OpenAI.CompletionUsage & {
  completion_tokens_details?: { accepted_prediction_tokens?: number; rejected_prediction_tokens?: number };
};

describe('legacy completions e2e', () => {
  let stack: TestStack;
  let client: OpenAI;

  before(async () => {
    stack = await startStack({
      models: [
        ...FIXTURE_CATALOGUE,
        { id: 'cortex-fim', file: 'fixture:cortex-fim', context_size: 512, slots: 1 },
        { id: 'cortex-loop', file: 'fixture:cortex-loop', context_size: 512, slots: 1 },
        // Speculative decoding: a draft that always agrees (the same generator) and input lookup.
        { id: 'loop-draft', file: 'fixture:cortex-loop', context_size: 512, slots: 1, draft: 'cortex-loop' },
        { id: 'loop-lookup', file: 'fixture:cortex-loop', context_size: 512, slots: 1, draft: 'lookup' },
        // A draft with another tokenizer (stories260K: its tokens after the 256 bytes are words, the fixtures' are markers).
        { id: 'loop-foreign-draft', file: 'fixture:cortex-loop', context_size: 512, slots: 1, draft: STORIES_260K },
      ],
    });
    client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
  });

  after(async () => {
    await stack?.stop();
  });

  it('completions e2e - create continues the raw prompt, without the chat template', async () => {
    const { data, response } = await client.completions
      .create({ model: 'cortex-chat', prompt: 'Say hello.', max_tokens: 32 })
      .withResponse();
    assert.equal(response.status, 200);
    assert.equal(data.object, 'text_completion');
    assert.match(data.id, /^cmpl-/);
    assert.equal(data.choices.length, 1);
    assert.equal(data.choices[0]?.text, chat.expected.text);
    assert.equal(data.choices[0]?.index, 0);
    assert.equal(data.choices[0]?.finish_reason, 'stop');
    assert.equal(data.usage?.completion_tokens, chat.completionTokens);
    const chatted = await client.chat.completions.create({
      model: 'cortex-chat',
      messages: [{ role: 'user', content: 'Say hello.' }],
    });
    const raw = data.usage?.prompt_tokens ?? 0;
    assert.ok(
      raw > 0 && raw < (chatted.usage?.prompt_tokens ?? 0),
      `the raw prompt (${raw} tokens) has no template around it (chat: ${chatted.usage?.prompt_tokens})`,
    );
  });

  it('completions e2e - stream delivers text_completion chunks, usage last, then [DONE]', async () => {
    const stream = await client.completions.create({
      model: 'cortex-chat',
      prompt: 'Say hello.',
      stream: true,
      stream_options: { include_usage: true },
    });
    const texts: string[] = [];
    let usage: OpenAI.CompletionUsage | null | undefined;
    let finish: string | null | undefined;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'text_completion');
      for (const choice of chunk.choices) {
        texts.push(choice.text);
        finish = choice.finish_reason ?? finish;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    assert.equal(texts.join(''), chat.expected.text);
    assert.ok(texts.filter(Boolean).length > 1, 'the text arrives in several chunks');
    assert.equal(finish, 'stop');
    assert.equal(usage?.completion_tokens, chat.completionTokens);

    const { status, messages } = await postSse(`${stack.baseUrl}/v1/completions`, {
      model: 'cortex-chat',
      prompt: 'Hi',
      stream: true,
    });
    assert.equal(status, 200);
    assert.equal(messages.at(-1)?.data, '[DONE]');
  });

  it('completions e2e - an array prompt gets one choice per prompt, streamed and not', async () => {
    const prompts = ['One.', 'Two.', 'Three.'];
    const data = await client.completions.create({ model: 'cortex-chat', prompt: prompts });
    assert.deepEqual(
      data.choices.map((c) => c.index),
      [0, 1, 2],
    );
    for (const choice of data.choices) assert.equal(choice.text, chat.expected.text);
    assert.equal(data.usage?.completion_tokens, prompts.length * chat.completionTokens);

    const stream = await client.completions.create({
      model: 'cortex-chat',
      prompt: prompts,
      stream: true,
      stream_options: { include_usage: true },
    });
    const texts = prompts.map(() => '');
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      for (const choice of chunk.choices) texts[choice.index] += choice.text;
      if (chunk.usage) usage = chunk.usage;
    }
    assert.deepEqual(
      texts,
      prompts.map(() => chat.expected.text),
    );
    assert.equal(usage?.completion_tokens, prompts.length * chat.completionTokens);

    // n completions of each prompt, the first prompt's first.
    const twice = await client.completions.create({ model: 'cortex-chat', prompt: ['One.', 'Two.'], n: 2, echo: true });
    assert.deepEqual(
      twice.choices.map((c) => [c.index, c.text]),
      [
        [0, `One.${chat.expected.text}`],
        [1, `One.${chat.expected.text}`],
        [2, `Two.${chat.expected.text}`],
        [3, `Two.${chat.expected.text}`],
      ],
    );
  });

  it('completions e2e - echo sends the prompt back first; token-id prompts work too', async () => {
    const echoed = await client.completions.create({ model: 'cortex-chat', prompt: 'Say hello. ', echo: true });
    assert.equal(echoed.choices[0]?.text, `Say hello. ${chat.expected.text}`);
    const tokens = await client.completions.create({
      model: 'cortex-chat',
      prompt: [byteToken('H'), byteToken('i')],
      echo: true,
    });
    assert.equal(tokens.choices[0]?.text, `Hi${chat.expected.text}`);
    assert.equal(tokens.usage?.prompt_tokens, 2);
  });

  it('completions e2e - stop and max_tokens end the text where asked', async () => {
    const stopped = await client.completions.create({ model: 'cortex-chat', prompt: 'Say hello.', stop: [' tiny'] });
    assert.equal(stopped.choices[0]?.text, 'Hello from a');
    assert.equal(stopped.choices[0]?.finish_reason, 'stop');
    const short = await client.completions.create({ model: 'cortex-chat', prompt: 'Say hello.', max_tokens: 2 });
    assert.equal(short.choices[0]?.text, 'Hello from');
    assert.equal(short.choices[0]?.finish_reason, 'length');
    assert.equal(short.usage?.completion_tokens, 2);
  });

  it('completions e2e - suffix fills in the middle on a model with FIM tokens, and is refused without them', async () => {
    const filled = await client.completions.create({ model: 'cortex-fim', prompt: code, suffix: '\n' });
    assert.equal(filled.choices[0]?.text, fim.expected.infill?.text);
    const plain = await client.completions.create({ model: 'cortex-fim', prompt: code });
    assert.equal(plain.choices[0]?.text, fim.expected.text);
    await assert.rejects(
      client.completions.create({ model: 'cortex-chat', prompt: code, suffix: '\n' }),
      (error: unknown) => {
        assert.ok(error instanceof OpenAI.BadRequestError);
        assert.equal(error.param, 'suffix');
        assert.match(error.message, /fill-in-the-middle/);
        return true;
      },
    );
  });

  it('completions e2e - /v1/models shows completions and fim capabilities once loaded', async () => {
    const entry = (await client.models.retrieve('cortex-fim')) as unknown as { capabilities: Record<string, unknown> };
    assert.equal(entry.capabilities.completions, true);
    assert.equal(entry.capabilities.fim, true);
    const plain = (await client.models.retrieve('cortex-chat')) as unknown as { capabilities: Record<string, unknown> };
    assert.equal(plain.capabilities.fim, false);
  });

  it('completions e2e - bad requests are 400s naming the field', async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ model: 'cortex-chat' }, 'prompt'],
      [{ model: 'cortex-chat', prompt: [] }, 'prompt'],
      [{ model: 'cortex-chat', prompt: [{ text: 'x' }, 'y'] }, 'prompt[0]'],
      [{ model: 'cortex-chat', prompt: Array.from({ length: 17 }, () => 'x') }, 'prompt'],
      [{ model: 'cortex-chat', prompt: [1.5] }, 'prompt[0]'],
      [{ model: 'cortex-chat', prompt: [10_000_000] }, 'prompt'],
      [{ model: 'cortex-chat', prompt: ['x', 'y'], n: 9 }, 'n'],
      [{ model: 'cortex-chat', prompt: 'x', best_of: 3 }, 'best_of'],
      [{ model: 'cortex-chat', prompt: 'x', logprobs: 21 }, 'logprobs'],
      [{ model: 'cortex-chat', prompt: 'x', logprobs: 2, echo: true, suffix: 'y' }, 'suffix'],
      [{ model: 'cortex-chat', prompt: 'x', max_tokens: 0 }, 'max_tokens'],
      [{ model: 'cortex-chat', prompt: 'hello '.repeat(2000) }, 'prompt'],
      [{ model: 'cortex-chat', prompt: 'x', stream_options: { include_usage: true } }, 'stream_options'],
    ];
    for (const [body, param] of cases) {
      const response = await postJson(`${stack.baseUrl}/v1/completions`, body);
      const error = ((await response.json()) as { error: { param: string; type: string; message: string } }).error;
      assert.equal(response.status, 400, `${JSON.stringify(body).slice(0, 80)}: ${error.message}`);
      assert.equal(error.param, param, error.message);
      assert.equal(error.type, 'invalid_request_error');
    }
    const unknown = await postJson(`${stack.baseUrl}/v1/completions`, { model: 'no-such-model', prompt: 'x' });
    assert.equal(unknown.status, 404);
  });

  it('completions e2e - a draft model and input lookup report drafted and accepted tokens, with the same text at temperature 0', async () => {
    // The loop's own sentence twice, as token ids: input lookup finds what follows in the prompt.
    const cycle = fixtureChainTokens('cortex-loop');
    const request = { prompt: [...cycle, ...cycle], max_tokens: 24, temperature: 0 };
    const plain = await client.completions.create({ model: 'cortex-loop', ...request });
    assert.ok(plain.choices[0]?.text.startsWith(loop.expected.text));
    assert.equal((plain.usage as Usage).completion_tokens_details, undefined, 'no speculative counts without a draft');
    for (const model of ['loop-draft', 'loop-lookup']) {
      const drafted = await client.completions.create({ model, ...request });
      assert.equal(drafted.choices[0]?.text, plain.choices[0]?.text, `${model} writes what the model alone writes`);
      const details = (drafted.usage as Usage).completion_tokens_details;
      const accepted = details?.accepted_prediction_tokens ?? 0;
      assert.ok(accepted > 0, `${model}: ${JSON.stringify(details)}`);
      assert.ok((details?.rejected_prediction_tokens ?? -1) >= 0, `${model}: ${JSON.stringify(details)}`);
      const entry = (await client.models.retrieve(model)) as unknown as { capabilities: Record<string, unknown> };
      assert.equal(entry.capabilities.speculative, model === 'loop-draft' ? 'draft' : 'lookup');
    }
    const streamed = await client.chat.completions.create({
      model: 'loop-draft',
      messages: [{ role: 'user', content: 'Go.' }],
      max_tokens: 12,
      temperature: 0,
    });
    const details = (streamed.usage as Usage).completion_tokens_details;
    assert.ok(
      (details?.accepted_prediction_tokens ?? 0) > 0,
      `chat completions report them too: ${JSON.stringify(details)}`,
    );
  });

  it('completions e2e - a draft with another tokenizer is refused at load, naming the first token they disagree on; the worker stays up', async () => {
    await assert.rejects(
      client.completions.create({ model: 'loop-foreign-draft', prompt: 'Go', max_tokens: 4 }),
      (error: InstanceType<typeof OpenAI.APIError>) => {
        assert.equal(error.status, 503);
        assert.match(
          error.message,
          /has another tokenizer \(token 259 is "▁t", the model's is "<\|im_start\|>"\); use a draft of the same model family, or draft: lookup/,
        );
        return true;
      },
    );
    const after = await client.completions.create({ model: 'loop-draft', prompt: 'Go', max_tokens: 4 });
    assert.ok(after.choices[0]?.text, 'the worker still serves');
  });

  it('completions e2e - metrics count the endpoint and the draft tokens', async () => {
    const read = async (): Promise<string> => (await fetch(`${stack.metricsUrl}/metrics`)).text();
    await waitFor(
      async () => /cortex_accepted_draft_tokens_total\{model="loop-draft"\} [1-9]/.test(await read()),
      10_000,
    );
    const text = await read();
    assert.match(text, /cortex_requests_total\{[^}]*api="openai.completions"[^}]*\} [1-9]/);
    assert.match(text, /cortex_draft_tokens_total\{model="loop-lookup"\} [1-9]/);
  });
});
