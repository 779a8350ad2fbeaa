import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { CortexError, type Sampling } from '@cortex/contracts';
import { ensureFixtureModels, fixtureTokenId } from '@cortex/fixtures';
import type { EngineEvent, EngineModel } from './engine.types.js';
import { LlamaEngine } from './llama-engine.js';

/** ../shared/models beside the repository (this file runs from apps/worker/dist/engine). */
const STORIES_260K = fileURLToPath(new URL('../../../../../shared/models/stories260K.gguf', import.meta.url));

/**
 * The sampler's knobs reach node-llama-cpp: checked by what they do to a real model's output
 * (stories260K, trained, from ../shared/models: the project's fixtures are near one-hot and show no
 * difference).
 */
/** Runs `model` once with `sampling` on a short chat; its text. */
async function text(model: EngineModel, sampling: Sampling): Promise<string> {
  const events: EngineEvent[] = [];
  const request = {
    model: model.id,
    messages: [{ role: 'user' as const, content: 'Tell me something.' }],
    sampling,
    stream: true,
  };
  await model.generate({
    request,
    receivedAt: performance.now(),
    signal: new AbortController().signal,
    emit: (event) => events.push(event),
  });
  assert.ok(
    events.some((event) => event.type === 'finish'),
    JSON.stringify(events.at(-1)),
  );
  return events.flatMap((event) => (event.type === 'text' ? [event.text] : [])).join('');
}

const SEEDS = Array.from({ length: 32 }, (_, i) => i + 1);

/**
 * On cortex-coin, whose one step has a designed distribution (Heads 0, Tails -1, Edge -4 nats) and
 * whose GGUF asks for temperature 1.5: the GGUF's default, min_p and logit_bias, each by the answers
 * of seeded runs.
 */
describe('sampling on a designed distribution', () => {
  let engine: LlamaEngine;
  let coin: EngineModel;
  let dir: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'cortex-sampling-'));
    const paths = await ensureFixtureModels(dir);
    engine = await LlamaEngine.create({ gpu: 'cpu', threads: 1, log: () => undefined });
    coin = await engine.load({
      id: 'cortex-coin',
      path: paths['cortex-coin'] as string,
      contextSize: 256,
      slots: 1,
      maxQueue: 4,
    });
  });

  after(async () => {
    await coin?.dispose();
    await engine?.dispose();
    await rm(dir, { recursive: true, force: true });
  });

  async function answers(sampling: Sampling): Promise<string[]> {
    const out: string[] = [];
    for (const seed of SEEDS) out.push(await text(coin, { ...sampling, seed }));
    return out;
  }

  it(
    'sampling - a request without a temperature samples at the ' +
      "one its GGUF carries (general.sampling.temp), not cortex's 0.8",
    async () => {
      const byDefault = await answers({});
      assert.deepEqual(byDefault, await answers({ temperature: 1.5 }), 'the same answers as at 1.5, seed by seed');
      assert.notDeepEqual(byDefault, await answers({ temperature: 0.8 }));
      assert.ok(
        byDefault.some((answer) => answer !== 'Heads'),
        byDefault.join(' '),
      );
      assert.deepEqual(new Set(await answers({ temperature: 0 })), new Set(['Heads']), 'the request wins');
    },
  );

  it('sampling - min_p drops the choices below its share of the likeliest: 0.5 leaves Heads alone (Tails is 0.37 of it)', async () => {
    assert.ok((await answers({ temperature: 1.5 })).includes('Tails'));
    assert.deepEqual(new Set(await answers({ temperature: 1.5, minP: 0.5 })), new Set(['Heads']));
    assert.ok((await answers({ temperature: 1.5, minP: 0.3 })).includes('Tails'), 'min_p 0.3 keeps Tails');
  });

  it('sampling - logit_bias is added to the designed logits; a token past the vocabulary is a 400 naming logit_bias', async () => {
    const tails = String(fixtureTokenId('Tails'));
    const heads = String(fixtureTokenId('Heads'));
    assert.equal(
      await text(coin, { temperature: 0, logitBias: { [tails]: 2 } }),
      'Tails',
      'Tails at -1 + 2 passes Heads at 0',
    );
    assert.equal(await text(coin, { temperature: 0, logitBias: { [tails]: 0.5 } }), 'Heads', 'Tails at -0.5 does not');
    assert.equal(await text(coin, { temperature: 0, logitBias: { [heads]: -100 } }), 'Tails');
    await assert.rejects(
      text(coin, { temperature: 0, logitBias: { '999999': 1 } }),
      (error: Error) =>
        error instanceof CortexError &&
        error.extra.param === 'logit_bias' &&
        /not in cortex-coin's vocabulary/.test(error.message),
    );
  });

  it(
    "sampling - logprobs: the generated token's and the likeliest of its " +
      'step, by the designed logits; none for a request that did not ask',
    async () => {
      const events: EngineEvent[] = [];
      const request = {
        model: coin.id,
        messages: [{ role: 'user' as const, content: 'Flip.' }],
        sampling: { temperature: 0 },
        stream: true,
        logprobs: 3,
      };
      await coin.generate({
        request,
        receivedAt: performance.now(),
        signal: new AbortController().signal,
        emit: (event) => events.push(event),
      });
      const logprobs = events.flatMap((event) => (event.type === 'text' ? (event.logprobs ?? []) : []));
      assert.equal(logprobs.length, 1, 'one answer token; the end of generation has none');
      const [entry] = logprobs;
      const designed = [0, -1, -4];
      const total = Math.log(designed.reduce((sum, logit) => sum + Math.exp(logit), 0));
      assert.equal(entry?.token, 'Heads');
      assert.deepEqual(entry?.bytes, [...Buffer.from('Heads')]);
      assert.deepEqual(
        entry?.top.map((t) => t.token),
        ['Heads', 'Tails', 'Edge'],
      );
      entry?.top.forEach((t, i) =>
        assert.ok(Math.abs(t.logprob - ((designed[i] ?? 0) - total)) < 0.01, `${t.token}: ${t.logprob}`),
      );
      assert.equal(entry?.logprob, entry?.top[0]?.logprob);
      const plain: EngineEvent[] = [];
      await coin.generate({
        request: { ...request, logprobs: undefined },
        receivedAt: performance.now(),
        signal: new AbortController().signal,
        emit: (event) => plain.push(event),
      });
      assert.ok(plain.every((event) => event.type !== 'text' || event.logprobs === undefined));
    },
  );
});

describe('sampling', { skip: !existsSync(STORIES_260K) && 'no ../shared/models' }, () => {
  let engine: LlamaEngine;
  let loop: EngineModel;

  before(async () => {
    engine = await LlamaEngine.create({ gpu: 'cpu', threads: 1, log: () => undefined });
    loop = await engine.load({ id: 'stories260K', path: STORIES_260K, contextSize: 1024, slots: 1, maxQueue: 4 });
  });

  after(async () => {
    await loop?.dispose();
    await engine?.dispose();
  });

  it('sampling - top_k 1 and min_p 1 leave only the likeliest token: at temperature 2 they write what greedy decoding writes', async () => {
    const greedy = await text(loop, { temperature: 0, maxTokens: 48 });
    const hot = await Promise.all([1, 2, 3].map((seed) => text(loop, { temperature: 2, seed, maxTokens: 48 })));
    assert.ok(
      hot.some((t) => t !== greedy),
      'at temperature 2 alone the output varies',
    );
    for (const seed of [1, 2, 3]) {
      assert.equal(await text(loop, { temperature: 2, seed, topK: 1, maxTokens: 48 }), greedy, `top_k 1, seed ${seed}`);
      assert.equal(await text(loop, { temperature: 2, seed, minP: 1, maxTokens: 48 }), greedy, `min_p 1, seed ${seed}`);
    }
  });

  it('sampling - a repetition penalty changes the greedy output, over the latest repeat_last_n tokens (0: none)', async () => {
    const plain = await text(loop, { temperature: 0, maxTokens: 64 });
    assert.notEqual(
      await text(loop, { temperature: 0, repetitionPenalty: 3, maxTokens: 64 }),
      plain,
      'the repeated words are made less likely',
    );
    assert.equal(
      await text(loop, { temperature: 0, repetitionPenalty: 3, repeatLastN: 0, maxTokens: 64 }),
      plain,
      'looking at no token, it changes nothing',
    );
  });

  it(
    'sampling - XTC and DRY reach the sampler: each changes the greedy ' +
      'output, and off (probability 0, no multiplier) it is unchanged',
    async () => {
      const plain = await text(loop, { temperature: 0, maxTokens: 64 });
      assert.notEqual(
        await text(loop, { temperature: 0, xtc: { probability: 1, threshold: 0.05 }, maxTokens: 64 }),
        plain,
        'XTC removes the likeliest tokens',
      );
      assert.equal(
        await text(loop, { temperature: 0, xtc: { probability: 0, threshold: 0.05 }, maxTokens: 64 }),
        plain,
      );
      assert.notEqual(
        await text(loop, { temperature: 0, dry: { multiplier: 5, allowedLength: 1 }, maxTokens: 64 }),
        plain,
        'DRY breaks the repeats',
      );
      assert.equal(
        await text(loop, { temperature: 0, dry: { multiplier: 5, allowedLength: 1, lastN: 0 }, maxTokens: 64 }),
        plain,
        'looking at no token, it changes nothing',
      );
    },
  );
});
