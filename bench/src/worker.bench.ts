/**
 * `npm run bench`: decode throughput of the worker, measured at its bus output, against a raw
 * node-llama-cpp evaluate loop on the same model, context and threads, in one run; then aggregate
 * throughput at 1, 2, 4 and 8 concurrent streams.
 *
 * Options (env): BENCH_THREADS (default 1), BENCH_TOKENS (default 512), BENCH_RUNS (default 5),
 * BENCH_GPU (cpu | auto | cuda | vulkan; default cpu), BENCH_STREAM_INTERVAL (ms, default 5: the worker's
 * `stream_interval_ms`).
 */
import 'reflect-metadata';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { connect } from '@nats-io/transport-node';
import { ensureFixtureModels } from '@cortex/fixtures';
import { startTestNats, STORIES_260K, waitFor } from '@cortex/testing';
import { RawBaseline } from './raw-baseline.js';
import { WorkerClient } from './worker-client.js';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const THREADS = Number(process.env.BENCH_THREADS ?? 1);
const TOKENS = Number(process.env.BENCH_TOKENS ?? 512);
const RUNS = Number(process.env.BENCH_RUNS ?? 5);
const GPU = process.env.BENCH_GPU ?? 'cpu';
const STREAM_INTERVAL = Number(process.env.BENCH_STREAM_INTERVAL ?? 5);
const CONTEXT = 2048;
/** Sequences of the model the concurrency runs use; single-stream runs use one, like the raw loop. */
const SLOTS = Number(process.env.BENCH_SLOTS ?? 8);
const PROMPT = 'Once upon a time';

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? 0;
};
const log = (line: string): void => console.log(line);

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'cortex-bench-'));
  const fixtures = await ensureFixtureModels(join(dir, 'models'));
  const models: Array<{ id: string; path: string }> = [];
  if (existsSync(STORIES_260K)) models.push({ id: 'stories260K', path: STORIES_260K });
  models.push({ id: 'cortex-loop', path: fixtures['cortex-loop']! });
  log(`cortex bench — ${new Date().toISOString()}`);
  log(`machine: ${cpus()[0]?.model ?? 'unknown cpu'} × ${cpus().length}, ${Math.round(totalmem() / 2 ** 30)} GiB, node ${process.version}`);
  log(`settings: threads ${THREADS}, gpu ${GPU}, context ${CONTEXT}, stream interval ${STREAM_INTERVAL} ms, ${TOKENS} tokens per run, median of ${RUNS} runs\n`);

  const nats = await startTestNats();
  const config = { nats: { url: nats.url }, worker: { id: 'bench', threads: THREADS, gpu: GPU, models_dir: join(dir, 'models'), heartbeat_ms: 250, max_queue: 64, stream_interval_ms: STREAM_INTERVAL }, log_level: 'warn' };
  writeFileSync(join(dir, 'cortex.yaml'), JSON.stringify(config));
  const worker = spawn(process.execPath, [...(process.env.BENCH_WORKER_PROFILE ? ['--cpu-prof', '--cpu-prof-dir', process.env.BENCH_WORKER_PROFILE] : []), join(ROOT, 'apps/cli/dist/main.js'), 'serve', 'worker'], {
    env: { ...process.env, CORTEX_CONFIG: join(dir, 'cortex.yaml'), NO_COLOR: '1' },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  const nc = await connect({ servers: nats.url });
  try {
    let beat = false;
    const sub = nc.subscribe('llm.hb.v1.worker.bench', { callback: () => void (beat = true) });
    await waitFor(() => beat, 60_000);
    sub.unsubscribe();
    const client = new WorkerClient(nc, 'bench');

    log('single stream: raw sequence.evaluate loop vs worker (at its bus output)');
    log('model          raw tok/s   worker tok/s   ratio');
    const ttftLines: string[] = [];
    for (const model of models) {
      log(`  ${model.id}: loading in the worker and in this process…`);
      // One sequence, as in the raw loop: a context with more sequences holds a larger KV cache.
      await client.load(model.id, model.path, CONTEXT, 1);
      const baseline = await RawBaseline.open({ path: model.path, contextSize: CONTEXT, threads: THREADS, prompt: PROMPT });
      const raw = [];
      const runs = [];
      try {
        // Warm-up (JIT, caches), then alternate raw and worker runs so drift hits both alike.
        for (let i = 0; i < 3; i++) {
          await baseline.run(TOKENS);
          await client.generate(model.id, PROMPT, TOKENS);
        }
        for (let i = 0; i < RUNS; i++) {
          log(`  ${model.id}: run ${i + 1}/${RUNS}…`);
          raw.push(await baseline.run(TOKENS));
          runs.push(await client.generate(model.id, PROMPT, TOKENS));
        }
      } finally {
        await baseline.close();
      }
      const rawRate = median(raw.map((r) => r.tokensPerSecond));
      const workerRate = median(runs.map((r) => r.tokensPerSecond));
      const rawTtft = median(raw.map((r) => r.ttftMs));
      const workerTtft = median(runs.map((r) => r.ttftMs));
      ttftLines.push(`${model.id.padEnd(14)} ${rawTtft.toFixed(2).padStart(6)}   ${workerTtft.toFixed(2).padStart(9)}   ${(workerTtft - rawTtft).toFixed(2).padStart(12)}`);
      log(`${model.id.padEnd(14)} ${rawRate.toFixed(0).padStart(9)}   ${workerRate.toFixed(0).padStart(12)}   ${(workerRate / rawRate).toFixed(2)}  (tokens/run: raw ${raw[0]?.tokens}, worker ${runs[0]?.tokens}; worker's own measure ${median(runs.map((r) => r.reportedTokensPerSecond)).toFixed(0)})`);
    }

    log('\ntime to first token: raw = evaluate() start → first token (prompt eval); worker = generate arrival → first token event');
    log('model          raw ms   worker ms   worker − raw');
    for (const line of ttftLines) log(line);

    const base = models[0]!;
    const concurrencyModel = `${base.id}-x${SLOTS}`;
    await client.load(concurrencyModel, base.path, CONTEXT, SLOTS);
    log(`\naggregate throughput by concurrency (${base.id}, ${SLOTS} slots, ${TOKENS} tokens per stream)`);
    log('streams   aggregate tok/s   per-stream tok/s');
    for (const streams of [1, 2, 4, 8]) {
      const started = performance.now();
      const results = await Promise.all(Array.from({ length: streams }, () => client.generate(concurrencyModel, PROMPT, TOKENS)));
      const seconds = (performance.now() - started) / 1000;
      const total = results.reduce((sum, r) => sum + r.tokens, 0);
      log(`${String(streams).padStart(7)}   ${(total / seconds).toFixed(0).padStart(15)}   ${median(results.map((r) => r.tokensPerSecond)).toFixed(0).padStart(16)}`);
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
