import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import type { Sampling } from '@cortex/contracts';
import type { EngineEvent, EngineModel } from './engine.types.js';
import { LlamaEngine } from './llama-engine.js';

/** ../shared/models beside the repository (this file runs from apps/worker/dist/engine). */
const STORIES_260K = fileURLToPath(new URL('../../../../../shared/models/stories260K.gguf', import.meta.url));

/**
 * The sampler's knobs reach node-llama-cpp: checked by what they do to a real model's output
 * (stories260K, trained, from ../shared/models: the project's fixtures are near one-hot and show no
 * difference).
 */
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

  async function text(model: EngineModel, sampling: Sampling): Promise<string> {
    const events: EngineEvent[] = [];
    const request = { model: model.id, messages: [{ role: 'user' as const, content: 'Tell me something.' }], sampling, stream: true };
    await model.generate({ request, receivedAt: performance.now(), signal: new AbortController().signal, emit: (event) => events.push(event) });
    assert.ok(events.some((event) => event.type === 'finish'), JSON.stringify(events.at(-1)));
    return events.flatMap((event) => (event.type === 'text' ? [event.text] : [])).join('');
  }

  it('sampling - top_k 1 and min_p 1 leave only the likeliest token: at temperature 2 they write what greedy decoding writes', async () => {
    const greedy = await text(loop, { temperature: 0, maxTokens: 48 });
    const hot = await Promise.all([1, 2, 3].map((seed) => text(loop, { temperature: 2, seed, maxTokens: 48 })));
    assert.ok(hot.some((t) => t !== greedy), 'at temperature 2 alone the output varies');
    for (const seed of [1, 2, 3]) {
      assert.equal(await text(loop, { temperature: 2, seed, topK: 1, maxTokens: 48 }), greedy, `top_k 1, seed ${seed}`);
      assert.equal(await text(loop, { temperature: 2, seed, minP: 1, maxTokens: 48 }), greedy, `min_p 1, seed ${seed}`);
    }
  });

  it('sampling - a repetition penalty changes the greedy output, over the latest repeat_last_n tokens (0: none)', async () => {
    const plain = await text(loop, { temperature: 0, maxTokens: 64 });
    assert.notEqual(await text(loop, { temperature: 0, repetitionPenalty: 3, maxTokens: 64 }), plain, 'the repeated words are made less likely');
    assert.equal(await text(loop, { temperature: 0, repetitionPenalty: 3, repeatLastN: 0, maxTokens: 64 }), plain, 'looking at no token, it changes nothing');
  });
});
