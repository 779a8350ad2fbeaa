import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { SEED_HEADER } from '@cortex/contracts';
import { postJson, startStack, STORIES_260K, storiesAvailable, type TestStack } from '@cortex/testing';

/**
 * Sampling without a seed, on stories260K (../shared/models): a real small model trained on stories,
 * whose 24 tokens at temperature 1 rarely repeat, where the fixture models have a handful of outcomes.
 */
const MODEL = 'stories260K';
const user = [{ role: 'user' as const, content: 'Tell me a story.' }];
const SAMPLED = { temperature: 1, max_tokens: 24 };

interface ChatBody {
  choices: Array<{ index: number; message: { content: string } }>;
}
interface CompletionBody {
  choices: Array<{ index: number; text: string }>;
}

/** The seeds a response names, in choice order. */
function seedsOf(response: Response): number[] {
  const header = response.headers.get(SEED_HEADER);
  assert.ok(header, `${SEED_HEADER} is set`);
  assert.match(header, /^\d+(,\d+)*$/);
  return header.split(',').map(Number);
}

describe('sampling e2e (seeds)', { skip: !storiesAvailable() && 'no ../shared/models' }, () => {
  let stack: TestStack;

  before(async () => {
    // One sequence: choices decoded in one batch beside others get logits that differ from a lone run's in
    // their last bits (llama.cpp's CPU kernels are not batch-invariant), which at temperature 1 now and
    // then flips a token; a choice replays from its seed where it ran alone too.
    stack = await startStack({
      models: [{ id: MODEL, file: STORIES_260K, context_size: 1024, slots: 1, pinned: true }],
    });
  });

  after(async () => {
    await stack?.stop();
  });

  const chat = async (body: Record<string, unknown>): Promise<{ response: Response; body: ChatBody }> => {
    const response = await postJson(`${stack.baseUrl}/v1/chat/completions`, { model: MODEL, messages: user, ...body });
    const parsed = (await response.json()) as ChatBody;
    assert.equal(response.status, 200, JSON.stringify(parsed));
    return { response, body: parsed };
  };
  const complete = async (body: Record<string, unknown>): Promise<{ response: Response; body: CompletionBody }> => {
    const response = await postJson(`${stack.baseUrl}/v1/completions`, { model: MODEL, ...body });
    const parsed = (await response.json()) as CompletionBody;
    assert.equal(response.status, 200, JSON.stringify(parsed));
    return { response, body: parsed };
  };

  it('sampling - Chat n: 16 without a seed: each choice samples with its own seed, and a choice replays from its seed', async () => {
    const { response, body } = await chat({ ...SAMPLED, n: 16 });
    const texts = body.choices.map((c) => c.message.content);
    assert.equal(texts.length, 16);
    assert.ok(new Set(texts).size >= 12, `distinct choices: ${new Set(texts).size}\n${texts.join('\n')}`);
    const seeds = seedsOf(response);
    assert.equal(seeds.length, 16);
    assert.equal(new Set(seeds).size, 16, 'a seed per choice');
    // Choice i is the request with n 1 and the i-th seed.
    for (const i of [0, 7, 15]) {
      const alone = await chat({ ...SAMPLED, seed: seeds[i] });
      assert.equal(alone.body.choices[0]?.message.content, texts[i], `choice ${i}`);
      assert.deepEqual(seedsOf(alone.response), [seeds[i]]);
    }
  });

  it('sampling - legacy completions without a seed: n: 16 and a list of prompts give distinct choices, a seed each', async () => {
    const { response, body } = await complete({ ...SAMPLED, prompt: 'Once upon a time', n: 16 });
    const texts = body.choices.map((c) => c.text);
    assert.equal(texts.length, 16);
    assert.ok(new Set(texts).size >= 12, `distinct choices: ${new Set(texts).size}\n${texts.join('\n')}`);
    assert.equal(new Set(seedsOf(response)).size, 16);

    const listed = await complete({ ...SAMPLED, prompt: Array.from({ length: 16 }, () => 'Once upon a time') });
    const listedTexts = listed.body.choices.map((c) => c.text);
    assert.ok(new Set(listedTexts).size >= 12, `distinct choices: ${new Set(listedTexts).size}`);
    assert.equal(new Set(seedsOf(listed.response)).size, 16);
  });

  it('sampling - 16 unseeded requests at once write 16 different answers', async () => {
    const answers = await Promise.all(Array.from({ length: 16 }, () => chat(SAMPLED)));
    const texts = answers.map((a) => a.body.choices[0]?.message.content);
    assert.equal(new Set(texts).size, 16, texts.join('\n'));
    assert.equal(new Set(answers.flatMap((a) => seedsOf(a.response))).size, 16);
  });

  it('sampling - a seeded request replays exactly and names its seed; seeded choices count up from it', async () => {
    const first = await chat({ ...SAMPLED, seed: 1234 });
    const again = await chat({ ...SAMPLED, seed: 1234 });
    assert.equal(again.body.choices[0]?.message.content, first.body.choices[0]?.message.content);
    assert.deepEqual(seedsOf(first.response), [1234]);
    const choices = await chat({ ...SAMPLED, seed: 1234, n: 3 });
    assert.deepEqual(seedsOf(choices.response), [1234, 1235, 1236]);
    assert.equal(choices.body.choices[0]?.message.content, first.body.choices[0]?.message.content);
    const completed = await complete({ ...SAMPLED, prompt: 'Once upon a time', seed: 99 });
    const replayed = await complete({ ...SAMPLED, prompt: 'Once upon a time', seed: 99 });
    assert.equal(replayed.body.choices[0]?.text, completed.body.choices[0]?.text);
    assert.deepEqual(seedsOf(completed.response), [99]);
  });

  it('sampling - a stream and an Anthropic Messages response name their seed too, and replay from it', async () => {
    const streamed = await postJson(`${stack.baseUrl}/v1/chat/completions`, {
      model: MODEL,
      messages: user,
      ...SAMPLED,
      stream: true,
    });
    assert.equal(streamed.status, 200);
    const [seed] = seedsOf(streamed);
    const text = (await streamed.text())
      .split('\n')
      .filter((line) => line.startsWith('data: {'))
      .map((line) => (JSON.parse(line.slice(6)) as { choices: Array<{ delta: { content?: string } }> }).choices)
      .map((choices) => choices[0]?.delta.content ?? '')
      .join('');
    assert.equal((await chat({ ...SAMPLED, seed })).body.choices[0]?.message.content, text);

    const messages = await postJson(
      `${stack.baseUrl}/v1/messages`,
      { model: MODEL, messages: user, max_tokens: 24, temperature: 1 },
      { 'anthropic-version': '2023-06-01' },
    );
    assert.equal(messages.status, 200, await messages.clone().text());
    assert.equal(seedsOf(messages).length, 1);
  });
});
