/**
 * `npm run bench:spec`: decode speed with speculative decoding against plain decoding of the same
 * model, in one process, runs alternating so that a busy machine slows every case alike. The
 * predictors are set up as the worker sets them up (engine/speculative.ts): a draft sequence that
 * waits for at least one drafted token per step, or input lookup fed the prompt.
 *
 * Cases on the fixtures (same vocabulary, greedy): cortex-loop drafted by itself (a draft that always
 * agrees), by cortex-chat (one that never does), input lookup over a prompt holding the loop's own
 * sentence (it finds the continuation) and over a text prompt (it finds nothing); and stories260K
 * with input lookup, when that model is in the shared models directory.
 *
 * Options (env): BENCH_THREADS (default 1), BENCH_TOKENS (generated per run, default 128),
 * BENCH_RUNS (default 7).
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import {
  DraftSequenceTokenPredictor,
  getLlama,
  getModuleVersion,
  InputLookupTokenPredictor,
  type Llama,
  type LlamaContextSequence,
  type LlamaModel,
  type Token,
  type TokenPredictor,
} from 'node-llama-cpp';
import { ensureFixtureModels, fixtureChainTokens } from '@cortex/fixtures';
import { STORIES_260K } from '@cortex/testing';

const THREADS = Number(process.env.BENCH_THREADS ?? 1);
const TOKENS = Number(process.env.BENCH_TOKENS ?? 128);
const RUNS = Number(process.env.BENCH_RUNS ?? 7);
const CONTEXT = 1024;

interface Case {
  name: string;
  /** The plain case this one is compared with (same model, same prompt). */
  baseline: string | null;
  sequence: LlamaContextSequence;
  prompt: Token[];
  lookup: boolean;
}

interface Run {
  tokensPerSecond: number;
  drafted: number;
  accepted: number;
  text: string;
}

const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? 0;
const range = (values: number[]): string => `${Math.min(...values).toFixed(2)}–${Math.max(...values).toFixed(2)}`;

async function sequenceOf(model: LlamaModel, predictor?: TokenPredictor): Promise<LlamaContextSequence> {
  const context = await model.createContext({
    contextSize: CONTEXT,
    sequences: 1,
    threads: THREADS,
    flashAttention: false,
  });
  return context.getSequence(predictor ? { tokenPredictor: predictor } : undefined);
}

async function draftFor(llama: Llama, path: string): Promise<TokenPredictor> {
  const draft = await llama.loadModel({ modelPath: path });
  return new DraftSequenceTokenPredictor(await sequenceOf(draft), { minTokens: 1 });
}

/** One greedy generation of TOKENS tokens from a cleared sequence; the prompt is evaluated first, untimed. */
async function generate(model: LlamaModel, c: Case): Promise<Run> {
  await c.sequence.clearHistory();
  if (c.lookup && c.sequence.tokenPredictor instanceof InputLookupTokenPredictor)
    c.sequence.tokenPredictor.updateInputTokens(c.prompt);
  await c.sequence.evaluateWithoutGeneratingNewTokens(c.prompt.slice(0, -1));
  const before = c.sequence.tokenPredictions;
  const out: Token[] = [];
  const started = performance.now();
  for await (const token of c.sequence.evaluate(c.prompt.slice(-1), { temperature: 0, yieldEogToken: true })) {
    // A model that ends its text goes on from the start, like the loop: the count stays comparable.
    out.push(token);
    if (out.length >= TOKENS) break;
  }
  const seconds = (performance.now() - started) / 1000;
  const after = c.sequence.tokenPredictions;
  return {
    tokensPerSecond: out.length / seconds,
    drafted: after.validated + after.refuted - before.validated - before.refuted,
    accepted: after.validated - before.validated,
    text: model.detokenize(out),
  };
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'cortex-bench-spec-'));
  const fixtures = await ensureFixtureModels(join(dir, 'models'));
  const llama = await getLlama({ gpu: false, build: 'never' });
  console.log(`cortex speculative decoding bench — ${new Date().toISOString()}`);
  console.log(
    `machine: ${cpus()[0]?.model ?? 'unknown cpu'} × ${cpus().length}, ${Math.round(totalmem() / 2 ** 30)} GiB, node ${process.version}, node-llama-cpp ${await getModuleVersion()}`,
  );
  console.log(
    `settings: cpu, threads ${THREADS}, context ${CONTEXT}, ${TOKENS} tokens per run, ${RUNS} alternating runs, temperature 0\n`,
  );

  const loop = await llama.loadModel({ modelPath: fixtures['cortex-loop'] as string });
  const cycle = fixtureChainTokens('cortex-loop') as Token[];
  const text = loop.tokenize('Tell me a story about a loop.', false);
  const cases: Array<{ model: LlamaModel; c: Case }> = [];
  const add = (model: LlamaModel, c: Case): void => void cases.push({ model, c });
  add(loop, {
    name: 'cortex-loop, plain',
    baseline: null,
    sequence: await sequenceOf(loop),
    prompt: text,
    lookup: false,
  });
  add(loop, {
    name: 'cortex-loop, draft that agrees (cortex-loop)',
    baseline: 'cortex-loop, plain',
    sequence: await sequenceOf(loop, await draftFor(llama, fixtures['cortex-loop'] as string)),
    prompt: text,
    lookup: false,
  });
  add(loop, {
    name: 'cortex-loop, draft that disagrees (cortex-chat)',
    baseline: 'cortex-loop, plain',
    sequence: await sequenceOf(loop, await draftFor(llama, fixtures['cortex-chat'] as string)),
    prompt: text,
    lookup: false,
  });
  add(loop, {
    name: 'cortex-loop, lookup finds nothing (text prompt)',
    baseline: 'cortex-loop, plain',
    sequence: await sequenceOf(loop, new InputLookupTokenPredictor()),
    prompt: text,
    lookup: true,
  });
  add(loop, {
    name: 'cortex-loop, plain, sentence prompt',
    baseline: null,
    sequence: await sequenceOf(loop),
    prompt: [...cycle, ...cycle],
    lookup: false,
  });
  add(loop, {
    name: 'cortex-loop, lookup finds it (sentence prompt)',
    baseline: 'cortex-loop, plain, sentence prompt',
    sequence: await sequenceOf(loop, new InputLookupTokenPredictor()),
    prompt: [...cycle, ...cycle],
    lookup: true,
  });
  if (existsSync(STORIES_260K)) {
    const stories = await llama.loadModel({ modelPath: STORIES_260K });
    const prompt = stories.tokenize(
      'Once upon a time, there was a little girl named Lily. She liked to play in the park with her dog. One day, Lily and her dog went to the park.',
      true,
    );
    add(stories, {
      name: 'stories260K, plain',
      baseline: null,
      sequence: await sequenceOf(stories),
      prompt,
      lookup: false,
    });
    add(stories, {
      name: 'stories260K, input lookup',
      baseline: 'stories260K, plain',
      sequence: await sequenceOf(stories, new InputLookupTokenPredictor()),
      prompt,
      lookup: true,
    });
  }

  // One round unmeasured: the first evaluation of each context and model is several times slower.
  for (const { model, c } of cases) await generate(model, c);
  const runs = new Map<string, Run[]>(cases.map(({ c }) => [c.name, []]));
  for (let r = 0; r < RUNS; r++) {
    // The order turns every run: no case always goes first (or right after the same neighbour).
    for (let i = 0; i < cases.length; i++) {
      const { model, c } = cases[(i + r) % cases.length] as { model: LlamaModel; c: Case };
      runs.get(c.name)?.push(await generate(model, c));
    }
  }

  console.log(
    '| case | tok/s median (range) | ratio to plain, median (range) | drafted / accepted per run | same text as plain |',
  );
  console.log('|---|---|---|---|---|');
  for (const { c } of cases) {
    const mine = runs.get(c.name) ?? [];
    const base = c.baseline ? (runs.get(c.baseline) ?? []) : [];
    // Each run against the plain run of the same round: the machine's load then was the same for both.
    const ratios = base.length ? mine.map((run, i) => run.tokensPerSecond / (base[i]?.tokensPerSecond ?? NaN)) : [];
    const rate = mine.map((run) => run.tokensPerSecond);
    const same = base.length ? (mine.every((run, i) => run.text === base[i]?.text) ? 'yes' : 'NO') : '—';
    const drafts = c.baseline
      ? `${median(mine.map((run) => run.drafted))} / ${median(mine.map((run) => run.accepted))}`
      : '—';
    console.log(
      `| ${c.name} | ${median(rate).toFixed(1)} (${range(rate)}) | ${ratios.length ? `${median(ratios).toFixed(2)} (${range(ratios)})` : '1'} | ${drafts} | ${same} |`,
    );
  }
  await llama.dispose();
  rmSync(dir, { recursive: true, force: true });
}

await main();
