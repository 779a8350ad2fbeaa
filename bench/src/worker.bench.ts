/**
 * `npm run bench`: decode throughput of the worker, measured at its bus output, against a raw
 * node-llama-cpp evaluate loop on the same model, context and threads, in one run; then aggregate
 * throughput at 1, 2, 4 and 8 concurrent streams; what asking for logprobs (the sampled token's alone,
 * and with 5 alternatives) costs per token at a 512- and a 32,000-token vocabulary; then what sizing one prompt costs the worker from
 * 1 KB to 256 KB (`prompt-sizing.ts`: its chunked count against tokenizing the text whole, in
 * microseconds per KB, so a constant column is linear). Also `npm run bench:worker`.
 *
 * Options (env): BENCH_THREADS (default 1), BENCH_TOKENS (default 512), BENCH_RUNS (default 9),
 * BENCH_GPU (cpu | auto | cuda | vulkan; default cpu), BENCH_STREAM_INTERVAL (ms, the worker's
 * `stream_interval_ms`; default: the worker's default), BENCH_PAUSE (ms of idle before every run, 50),
 * BENCH_SLOTS (8), BENCH_WORKER_PROFILE (a directory: the worker writes a CPU profile there).
 */
import 'reflect-metadata';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { connect } from '@nats-io/transport-node';
import { getLlama, LlamaLogLevel } from 'node-llama-cpp';
import { WorkerConfig } from '@cortex/config';
import { heartbeatSubject } from '@cortex/contracts';
import { ensureFixtureModels } from '@cortex/fixtures';
import { LLAMA_TINY_RANDOM, startTestNats, STORIES_260K, waitFor } from '@cortex/testing';
import { promptSizing } from './prompt-sizing.js';
import { RawBaseline, type DecodeRun } from './raw-baseline.js';
import { WorkerClient } from './worker-client.js';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const THREADS = Number(process.env.BENCH_THREADS ?? 1);
const TOKENS = Number(process.env.BENCH_TOKENS ?? 512);
const RUNS = Number(process.env.BENCH_RUNS ?? 9);
const GPU = process.env.BENCH_GPU ?? 'cpu';
const STREAM_INTERVAL = Number(process.env.BENCH_STREAM_INTERVAL ?? new WorkerConfig().streamIntervalMs);
/**
 * Idle time before every measured run, raw and worker alike. A process that has slept runs its next
 * few milliseconds several times slower on a VM (caches, a descheduled vCPU); without the pause the
 * worker would always start from idle and the raw loop never, which skews time to first token.
 */
const PAUSE = Number(process.env.BENCH_PAUSE ?? 50);
const CONTEXT = 2048;
/** Sequences of the model the concurrency runs use; single-stream runs use one, like the raw loop. */
const SLOTS = Number(process.env.BENCH_SLOTS ?? 8);
const PROMPT = 'Once upon a time';

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? 0;
};
const range = (values: number[]): string => `${Math.min(...values).toFixed(2)}–${Math.max(...values).toFixed(2)}`;
const pause = (): Promise<void> => new Promise((done) => setTimeout(done, PAUSE));
const log = (line: string): void => console.log(line);

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'cortex-bench-'));
  const fixtures = await ensureFixtureModels(join(dir, 'models'));
  const models: Array<{ id: string; path: string }> = [];
  if (existsSync(STORIES_260K)) models.push({ id: 'stories260K', path: STORIES_260K });
  models.push({ id: 'cortex-loop', path: fixtures['cortex-loop']! });
  log(`cortex bench — ${new Date().toISOString()}`);
  log(
    `machine: ${cpus()[0]?.model ?? 'unknown cpu'} × ${cpus().length}, ${Math.round(totalmem() / 2 ** 30)} GiB, node ${process.version}`,
  );
  log(
    `settings: threads ${THREADS}, gpu ${GPU}, context ${CONTEXT}, stream interval ${STREAM_INTERVAL} ms, ${TOKENS} tokens per run, ${RUNS} runs, ${PAUSE} ms idle before each\n`,
  );

  const nats = await startTestNats();
  const config = {
    nats: { url: nats.url },
    worker: {
      id: 'bench',
      threads: THREADS,
      gpu: GPU,
      models_dir: join(dir, 'models'),
      heartbeat_ms: 250,
      max_queue: 64,
      stream_interval_ms: STREAM_INTERVAL,
    },
    log_level: 'warn',
  };
  writeFileSync(join(dir, 'cortex.yaml'), JSON.stringify(config));
  const worker = spawn(
    process.execPath,
    [
      ...(process.env.BENCH_WORKER_PROFILE ? ['--cpu-prof', '--cpu-prof-dir', process.env.BENCH_WORKER_PROFILE] : []),
      join(ROOT, 'apps/cli/dist/main.js'),
      'serve',
      'worker',
    ],
    {
      env: { ...process.env, CORTEX_CONFIG: join(dir, 'cortex.yaml'), NO_COLOR: '1' },
      stdio: ['ignore', 'inherit', 'inherit'],
    },
  );
  const nc = await connect({ servers: nats.url });
  try {
    let beat = false;
    const sub = nc.subscribe(heartbeatSubject('bench'), { callback: () => void (beat = true) });
    await waitFor(() => beat, 60_000);
    sub.unsubscribe();
    const client = new WorkerClient(nc, 'bench');

    log('single stream: raw sequence.evaluate loop vs worker (at its bus output); raw and worker runs alternate,');
    log('each ratio is a worker run over the raw run just before it; medians, with the range of the ratios');
    log('model          raw tok/s   worker tok/s   ratio   (range)');
    const ttftLines: string[] = [];
    for (const model of models) {
      log(`  ${model.id}: loading in the worker and in this process…`);
      // One sequence, as in the raw loop: a context with more sequences holds a larger KV cache.
      await client.load(model.id, model.path, CONTEXT, 1);
      const baseline = await RawBaseline.open({
        path: model.path,
        contextSize: CONTEXT,
        threads: THREADS,
        prompt: PROMPT,
        gpu: GPU,
      });
      const raw: DecodeRun[] = [];
      const runs: Array<Awaited<ReturnType<WorkerClient['generate']>>> = [];
      try {
        // Warm-up (JIT, caches), then alternate raw and worker runs so drift hits both alike.
        for (let i = 0; i < 3; i++) {
          await baseline.run(TOKENS);
          await client.generate(model.id, PROMPT, TOKENS);
        }
        for (let i = 0; i < RUNS; i++) {
          log(`  ${model.id}: run ${i + 1}/${RUNS}…`);
          await pause();
          raw.push(await baseline.run(TOKENS));
          await pause();
          runs.push(await client.generate(model.id, PROMPT, TOKENS));
        }
      } finally {
        await baseline.close();
      }
      const rawRate = median(raw.map((r) => r.tokensPerSecond));
      const workerRate = median(runs.map((r) => r.tokensPerSecond));
      const ratios = runs.map((r, i) => r.tokensPerSecond / (raw[i]?.tokensPerSecond ?? Infinity));
      const cell = (value: number, width: number): string => value.toFixed(2).padStart(width);
      const ttft = median(runs.map((r) => r.ttftMs));
      const prompt = median(runs.map((r) => r.promptMs));
      const overhead = median(runs.map((r) => r.ttftMs - r.promptMs));
      ttftLines.push(
        `${model.id.padEnd(14)} ${cell(median(raw.map((r) => r.ttftMs)), 6)}   ${cell(ttft, 9)}   ${cell(prompt, 9)}   ${cell(overhead, 11)}   ${String(runs[0]?.promptTokens ?? 0).padStart(6)} / ${runs[0]?.cachedTokens ?? 0}`,
      );
      log(
        `${model.id.padEnd(14)} ${rawRate.toFixed(0).padStart(9)}   ${workerRate.toFixed(0).padStart(12)}   ${median(ratios).toFixed(2)}   (${range(ratios)})  tokens/run: raw ${raw[0]?.tokens}, worker ${runs[0]?.tokens}; worker's own measure ${median(runs.map((r) => r.reportedTokensPerSecond)).toFixed(0)} tok/s`,
      );
    }

    log('\ntime to first token, medians: raw = evaluate() start → first token (the whole prompt evaluated);');
    log('worker = generate arrival → first token, of which prompt eval = evaluating the tokens its sequence did not');
    log('already hold, and overhead = the rest (validation, template rendering, tokenizing, slot, prefix trim)');
    log('model          raw ms   worker ms   prompt ms   overhead ms   prompt / cached tokens');
    for (const line of ttftLines) log(line);

    const base = models[0]!;
    const concurrencyModel = `${base.id}-x${SLOTS}`;
    await client.load(concurrencyModel, base.path, CONTEXT, SLOTS);
    log(`\naggregate throughput by concurrency (${base.id}, ${SLOTS} slots, ${TOKENS} tokens per stream)`);
    log('streams   aggregate tok/s   per-stream tok/s');
    for (const streams of [1, 2, 4, 8]) {
      const started = performance.now();
      const results = await Promise.all(
        Array.from({ length: streams }, () => client.generate(concurrencyModel, PROMPT, TOKENS)),
      );
      const seconds = (performance.now() - started) / 1000;
      const total = results.reduce((sum, r) => sum + r.tokens, 0);
      log(
        `${String(streams).padStart(7)}   ${(total / seconds).toFixed(0).padStart(15)}   ${median(
          results.map((r) => r.tokensPerSecond),
        )
          .toFixed(0)
          .padStart(16)}`,
      );
    }

    // What logprobs cost: node-llama-cpp sorts the vocabulary at every step for the sampled token's
    // probability, and hands over a map of all of it for the likeliest alternatives.
    const LOGPROB_TOKENS = Math.min(TOKENS, 64);
    log(
      `\nlogprobs against none, single stream, ${LOGPROB_TOKENS} tokens a run, runs alternating; extra µs per token = 1/with - 1/without, median of pairs`,
    );
    log('model                 vocabulary   tok/s without   logprobs: tok/s, µs/token   top 5: tok/s, µs/token');
    for (const model of [
      { id: 'stories260K', path: STORIES_260K, vocabulary: 512 },
      { id: 'llama-2-tiny-random', path: LLAMA_TINY_RANDOM, vocabulary: 32_000 },
    ]) {
      if (!existsSync(model.path)) continue;
      const id = `${model.id}-logprobs`;
      await client.load(id, model.path, CONTEXT, 1);
      const rates: Record<'none' | 'one' | 'top', number[]> = { none: [], one: [], top: [] };
      for (let i = 0; i < RUNS + 2; i++) {
        const runs = { none: {}, one: { logprobs: 0 }, top: { logprobs: 5 } } as const;
        for (const [name, extra] of Object.entries(runs) as Array<[keyof typeof rates, object]>) {
          await pause();
          const run = await client.generate(id, PROMPT, LOGPROB_TOKENS, extra);
          // The first two rounds warm up.
          if (i >= 2) rates[name].push(run.reportedTokensPerSecond);
        }
      }
      const extra = (name: 'one' | 'top'): string => {
        const costs = rates.none.map((rate, i) => 1e6 / (rates[name][i] ?? rate) - 1e6 / rate);
        return `${median(rates[name]).toFixed(0).padStart(6)}, ${median(costs).toFixed(0).padStart(6)}`;
      };
      log(
        `${model.id.padEnd(21)} ${String(model.vocabulary).padStart(10)}   ${median(rates.none).toFixed(0).padStart(13)}   ${extra('one').padStart(25)}   ${extra('top').padStart(22)}`,
      );
    }

    // In this process, on one thread, like the worker's own count of a prompt that may not fit.
    const llama = await getLlama({ gpu: false, logLevel: LlamaLogLevel.error, build: 'never' });
    try {
      await promptSizing(llama, fixtures['cortex-chat']!, log);
    } finally {
      await llama.dispose();
    }
  } finally {
    await nc.close();
    worker.kill('SIGTERM');
    await new Promise((done) => worker.once('exit', done));
    await nats.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((error: Error) => {
  console.error(`bench failed: ${error.stack ?? error.message}`);
  process.exit(1);
});
