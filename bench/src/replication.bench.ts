/**
 * `npm run bench:replication`: two workers, one model, 1–64 closed-loop streamed chat completions,
 * with replication off (`max_replicas: 1`, the model stays on one worker) and on (a second copy loads
 * on the idle worker once requests keep waiting). Reports aggregate tokens per second, p95 queue wait
 * (the worker's own `queueMs`: time a request waited for a free sequence), each worker's share of the
 * tokens and the copies at the end of each level, and the on/off ratio per level — both modes in the
 * same run, on the same machine.
 *
 * Options (env): BENCH_MODEL (a GGUF; default stories260K from the shared models), BENCH_TOKENS (per
 * request, 128), BENCH_SLOTS (the model's sequences, 4), BENCH_WARM (seconds per level before measuring,
 * 8: long enough for a copy to load), BENCH_SECONDS (measured seconds per level, 10), BENCH_LEVELS
 * (comma list, 1,4,16,64), BENCH_THREADS (threads per worker, 1), BENCH_ROUNDS (off then on, this many
 * times, 1: on a shared machine more rounds show how much of a ratio is noise).
 */
import 'reflect-metadata';
import { cpus, totalmem } from 'node:os';
import { performance } from 'node:perf_hooks';
import { Subjects, type RequestFinishedEvent } from '@cortex/contracts';
import { startStack, STORIES_260K, watchBus, type TestStack } from '@cortex/testing';
import { percentile, streamChat } from './sse-load.js';

const MODEL = process.env.BENCH_MODEL ?? STORIES_260K;
const TOKENS = Number(process.env.BENCH_TOKENS ?? 128);
const SLOTS = Number(process.env.BENCH_SLOTS ?? 4);
const WARM = Number(process.env.BENCH_WARM ?? 8);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const LEVELS = (process.env.BENCH_LEVELS ?? '1,4,16,64').split(',').map(Number);
const THREADS = Number(process.env.BENCH_THREADS ?? 1);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 1);
const log = (line: string): void => console.log(line);

interface Level {
  streams: number;
  tokPerS: number;
  requests: number;
  queueP95: number;
  /** Completion tokens by worker id. */
  share: Map<string, number>;
  copies: number;
  failures: number;
}

async function runMode(mode: 'off' | 'on'): Promise<Level[]> {
  log(`\nreplication ${mode}: starting NATS, gateway, translator, router and two workers…`);
  const stack = await startStack({
    services: ['router', 'translator', 'worker', 'gateway'],
    models: [
      { id: 'bench', file: MODEL, context_size: 1024, slots: SLOTS, pinned: true, max_replicas: mode === 'on' ? 0 : 1 },
    ],
    config: {
      worker: { id: 'w1', threads: THREADS, max_queue: 256 },
      gateway: { stream_idle_timeout_ms: 60_000, placement_timeout_ms: 120_000 },
      log_level: 'warn',
    },
  });
  try {
    stack.spawnService('worker', { CORTEX_WORKER_ID: 'w2' });
    await stack.workersUp(2);
    await streamChat(stack.baseUrl, 'bench', 16);
    const levels: Level[] = [];
    for (const streams of LEVELS) levels.push(await runLevel(stack, streams));
    return levels;
  } finally {
    await stack.stop();
  }
}

async function runLevel(stack: TestStack, streams: number): Promise<Level> {
  log(`  ${streams} stream(s): ${WARM} s warm-up, ${SECONDS} s measured…`);
  const finished = await watchBus<RequestFinishedEvent>(stack.nc, Subjects.requestFinished);
  const measureFrom = performance.now() + WARM * 1000;
  const measureFromEpoch = Date.now() + WARM * 1000;
  const deadline = measureFrom + SECONDS * 1000;
  let failures = 0;
  await Promise.all(
    Array.from({ length: streams }, async () => {
      while (performance.now() < deadline) {
        await streamChat(stack.baseUrl, 'bench', TOKENS).catch(() => failures++);
      }
    }),
  );
  await finished.stop();
  // Requests that ended inside the measured window (one started in the warm-up counts: its last tokens came then).
  const events = finished.messages.filter((e) => e.model === 'bench' && e.usage && e.finishedAt >= measureFromEpoch);
  const seconds = (performance.now() - measureFrom) / 1000;
  const share = new Map<string, number>();
  for (const e of events)
    share.set(e.workerId ?? 'none', (share.get(e.workerId ?? 'none') ?? 0) + (e.usage?.completionTokens ?? 0));
  const tokens = [...share.values()].reduce((a, b) => a + b, 0);
  const fleet = await stack.fleet();
  const copies = (fleet?.workers ?? []).filter((w) =>
    w.models.some((m) => m.id === 'bench' && m.state === 'ready'),
  ).length;
  return {
    streams,
    tokPerS: tokens / seconds,
    requests: events.length,
    queueP95: percentile(
      events.map((e) => e.timings?.queueMs ?? 0),
      95,
    ),
    share,
    copies,
    failures,
  };
}

function table(levels: Level[]): void {
  log('streams   tok/s    requests   queue p95 ms   w1 share   w2 share   copies   failures');
  for (const l of levels) {
    const total = [...l.share.values()].reduce((a, b) => a + b, 0) || 1;
    const pct = (id: string): string => `${(((l.share.get(id) ?? 0) / total) * 100).toFixed(0)}%`;
    log(
      `${String(l.streams).padStart(7)}   ${l.tokPerS.toFixed(0).padStart(5)}   ${String(l.requests).padStart(8)}   ${l.queueP95.toFixed(0).padStart(12)}   ${pct('w1').padStart(8)}   ${pct('w2').padStart(8)}   ${String(l.copies).padStart(6)}   ${String(l.failures).padStart(8)}`,
    );
  }
}

async function main(): Promise<void> {
  log(`cortex replication bench — ${new Date().toISOString()}`);
  log(
    `machine: ${cpus()[0]?.model ?? 'unknown cpu'} × ${cpus().length}, ${Math.round(totalmem() / 2 ** 30)} GiB, node ${process.version}`,
  );
  log(
    `settings: ${MODEL}, ${SLOTS} slots, ${TOKENS} tokens per request, ${THREADS} thread(s) per worker, levels ${LEVELS.join(',')}, ${WARM} s warm-up + ${SECONDS} s per level, ${ROUNDS} round(s)`,
  );
  for (let round = 1; round <= ROUNDS; round++) {
    const off = await runMode('off');
    const on = await runMode('on');
    log(`\nround ${round}: replication off (max_replicas: 1)`);
    table(off);
    log(`\nround ${round}: replication on (max_replicas: 0, defaults otherwise)`);
    table(on);
    log(`\nround ${round}: on / off`);
    log('streams   tok/s ratio   queue p95 off → on (ms)');
    for (const [i, a] of off.entries()) {
      const b = on[i];
      if (!b) continue;
      log(
        `${String(a.streams).padStart(7)}   ${(b.tokPerS / Math.max(a.tokPerS, 1e-9)).toFixed(2).padStart(11)}   ${a.queueP95.toFixed(0)} → ${b.queueP95.toFixed(0)}`,
      );
    }
  }
}

main().catch((error: Error) => {
  console.error(`bench failed: ${error.stack ?? error.message}`);
  process.exit(1);
});
