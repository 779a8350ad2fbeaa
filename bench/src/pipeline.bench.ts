/**
 * `npm run bench:pipeline`: cortex's own token pipeline, without llama.cpp. Workers run the synthetic
 * engine (every model emits one word per token at BENCH_SYNTH_TPS per stream); closed-loop clients
 * keep 1, 16, 64 and 256 streamed chat completions open through one gateway and one NATS server, and
 * the bench reports tokens per second delivered over SSE, time to first token (p50/p99) and CPU seconds
 * per million tokens for every process.
 *
 * Options (env): BENCH_SYNTH_TPS (tokens per second per stream, 2000), BENCH_TOKENS (per request, 256),
 * BENCH_SECONDS (per concurrency level, 5), BENCH_LEVELS (comma list, 1,16,64,256),
 * BENCH_STREAM_INTERVAL (the worker's `stream_interval_ms`; default: the worker's default),
 * BENCH_PROFILE (a directory: every service writes a CPU profile there when it stops).
 */
import 'reflect-metadata';
import { cpus, totalmem } from 'node:os';
import { performance } from 'node:perf_hooks';
import { WorkerConfig } from '@cortex/config';
import { startStack } from '@cortex/testing';
import { cpuSeconds, percentile, streamChat, type StreamTiming } from './sse-load.js';

const TPS = Number(process.env.BENCH_SYNTH_TPS ?? 2000);
const TOKENS = Number(process.env.BENCH_TOKENS ?? 256);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const LEVELS = (process.env.BENCH_LEVELS ?? '1,16,64,256').split(',').map(Number);
const STREAM_INTERVAL = Number(process.env.BENCH_STREAM_INTERVAL ?? new WorkerConfig().streamIntervalMs);
/** A model holds at most 64 sequences; the streams are spread over enough models to run at once. */
const SLOTS = 64;
const MODELS = Math.ceil(Math.max(...LEVELS) / SLOTS);
const log = (line: string): void => console.log(line);

async function main(): Promise<void> {
  log(`cortex pipeline bench — ${new Date().toISOString()}`);
  log(
    `machine: ${cpus()[0]?.model ?? 'unknown cpu'} × ${cpus().length}, ${Math.round(totalmem() / 2 ** 30)} GiB, node ${process.version}`,
  );
  log(
    `settings: synthetic engine at ${TPS} tok/s per stream, ${TOKENS} tokens per request, ${SECONDS} s per level, stream interval ${STREAM_INTERVAL} ms, ${MODELS} model(s) × ${SLOTS} sequences\n`,
  );
  log('starting NATS, gateway, translator, router, metrics and one synthetic worker…');
  const models = Array.from({ length: MODELS }, (_, i) => ({
    id: `synthetic-${i}`,
    file: 'synthetic',
    slots: SLOTS,
    context_size: 4096,
    pinned: true,
  }));
  const stack = await startStack({
    models,
    ...(process.env.BENCH_PROFILE && { nodeArgs: ['--cpu-prof', '--cpu-prof-dir', process.env.BENCH_PROFILE] }),
    config: {
      worker: {
        engine: 'synthetic',
        synthetic_tokens_per_second: TPS,
        stream_interval_ms: STREAM_INTERVAL,
        max_queue: 1024,
      },
      gateway: { stream_idle_timeout_ms: 30_000 },
    },
  });
  try {
    const pids = new Map<string, number>();
    for (const [name, child] of stack.processes) if (child.pid) pids.set(name, child.pid);
    const natsPid = stack.nats.pid?.();
    if (natsPid) pids.set('nats-server', natsPid);
    // Warm-up: JIT, sockets, every model's first request.
    await Promise.all(models.map((m) => streamChat(stack.baseUrl, m.id, 32)));

    const rows: string[] = [];
    const cpuRows: string[] = [];
    for (const streams of LEVELS) {
      log(`  ${streams} stream(s) for ${SECONDS} s…`);
      const before = new Map([...pids].map(([name, pid]) => [name, cpuSeconds(pid)]));
      const client = process.cpuUsage();
      const started = performance.now();
      const deadline = started + SECONDS * 1000;
      const timings: StreamTiming[] = [];
      let failures = 0;
      let lastError = '';
      await Promise.all(
        Array.from({ length: streams }, async (_, i) => {
          while (performance.now() < deadline) {
            try {
              timings.push(await streamChat(stack.baseUrl, models[i % MODELS]!.id, TOKENS));
            } catch (error) {
              failures++;
              lastError = (error as Error).message;
            }
          }
        }),
      );
      const seconds = (performance.now() - started) / 1000;
      const tokens = timings.reduce((sum, t) => sum + t.tokens, 0);
      const ttfts = timings.map((t) => t.ttftMs);
      rows.push(
        `${String(streams).padStart(7)}   ${(tokens / seconds).toFixed(0).padStart(15)}   ${String(timings.length).padStart(8)}   ${percentile(ttfts, 50).toFixed(1).padStart(8)}   ${percentile(ttfts, 99).toFixed(1).padStart(8)}   ${String(failures).padStart(8)}${failures ? `  (${lastError.slice(0, 80)})` : ''}`,
      );
      const used = process.cpuUsage(client);
      const perMillion = (cpu: number): string => ((cpu / Math.max(tokens, 1)) * 1e6).toFixed(1).padStart(9);
      const cells = [...pids].map(([name, pid]) => `${name} ${perMillion(cpuSeconds(pid) - (before.get(name) ?? 0))}`);
      cpuRows.push(
        `${String(streams).padStart(7)}   ${cells.join('   ')}   client ${perMillion((used.user + used.system) / 1e6)}`,
      );
    }
    log('\naggregate delivery over SSE, closed loop (each stream starts its next request when one ends)');
    log('streams   delivered tok/s   requests   TTFT p50   TTFT p99   failures');
    for (const row of rows) log(row);
    log('\nCPU seconds per million tokens delivered, by process');
    for (const row of cpuRows) log(row);
  } finally {
    await stack.stop();
  }
}

main().catch((error: Error) => {
  console.error(`bench failed: ${error.stack ?? error.message}`);
  process.exit(1);
});
