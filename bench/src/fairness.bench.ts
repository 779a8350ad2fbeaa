/**
 * `npm run bench:fairness`: one worker, one model with a few sequences. Account A keeps 32 streamed
 * chat completions open (closed loop: each one that ends is replaced at once) while account B sends 2
 * at a time. Reports B's queue wait (the worker's own `queueMs`: time a request waited for a free
 * sequence) at p50 and p95 in three arms of the same run: (a) B alone, (b) B beside A with the fair
 * queue (`worker.queue_order: fair`), (c) B beside A first come first served (`fifo`, the order before
 * fair queueing). Both keys are stored keys of tier 5, so (b) is fairness between accounts within a tier.
 *
 * Options (env): BENCH_MODEL (a GGUF; default stories260K from the shared models), BENCH_TOKENS (per
 * request, 128), BENCH_SLOTS (the model's sequences, 4), BENCH_A (A's streams, 32), BENCH_B (B's, 2),
 * BENCH_WARM (seconds per arm before measuring, 5), BENCH_SECONDS (measured seconds per arm, 30),
 * BENCH_THREADS (worker threads, 1), BENCH_ROUNDS (the three arms, this many times, 1).
 */
import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import { cpus, totalmem } from 'node:os';
import { performance } from 'node:perf_hooks';
import { Subjects, type RequestFinishedEvent } from '@cortex/contracts';
import { startStack, STORIES_260K, watchBus, type TestStack } from '@cortex/testing';
import { percentile, streamChat } from './sse-load.js';

const MODEL = process.env.BENCH_MODEL ?? STORIES_260K;
const TOKENS = Number(process.env.BENCH_TOKENS ?? 128);
const SLOTS = Number(process.env.BENCH_SLOTS ?? 4);
const A_STREAMS = Number(process.env.BENCH_A ?? 32);
const B_STREAMS = Number(process.env.BENCH_B ?? 2);
const WARM = Number(process.env.BENCH_WARM ?? 5);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 30);
const THREADS = Number(process.env.BENCH_THREADS ?? 1);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 1);
const ADMIN = `sk-admin-${randomBytes(8).toString('hex')}`;
const log = (line: string): void => console.log(line);

interface Arm {
  name: string;
  /** B's requests that ended in the measured window, and their queue waits. */
  bRequests: number;
  bP50: number;
  bP95: number;
  bTokPerS: number;
  aRequests: number;
  aP50: number;
  aTokPerS: number;
  failures: number;
}

async function withStack<T>(
  order: 'fair' | 'fifo',
  work: (stack: TestStack, keys: { a: string; b: string }) => Promise<T>,
): Promise<T> {
  log(`\nqueue_order ${order}: starting NATS, gateway, translator, router and one worker…`);
  const stack = await startStack({
    services: ['router', 'translator', 'worker', 'gateway'],
    models: [{ id: 'bench', file: MODEL, context_size: 1024, slots: SLOTS, pinned: true }],
    config: {
      auth: { api_keys: ['sk-bench-static'], admin_keys: [ADMIN] },
      worker: { threads: THREADS, max_queue: 256, queue_order: order },
      gateway: { stream_idle_timeout_ms: 60_000, placement_timeout_ms: 120_000, stall_timeout_ms: 120_000 },
      log_level: 'warn',
    },
  });
  try {
    const a = await createKey(stack, 'bench-a', 'team-a');
    const b = await createKey(stack, 'bench-b', 'team-b');
    await streamChat(stack.baseUrl, 'bench', 16, { apiKey: a });
    return await work(stack, { a, b });
  } finally {
    await stack.stop();
  }
}

async function createKey(stack: TestStack, name: string, account: string): Promise<string> {
  const response = await fetch(`${stack.baseUrl}/admin/keys`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name, account, tier: 5 }),
  });
  if (!response.ok) throw new Error(`creating key ${name}: ${response.status} ${await response.text()}`);
  return ((await response.json()) as { secret: string }).secret;
}

/** Runs B's streams, and A's when `withA`, for the warm-up and the measured window; B's and A's waits from the request-finished events. */
async function runArm(stack: TestStack, name: string, keys: { a: string; b: string }, withA: boolean): Promise<Arm> {
  log(`  ${name}: ${WARM} s warm-up, ${SECONDS} s measured…`);
  const finished = await watchBus<RequestFinishedEvent>(stack.nc, Subjects.requestFinished);
  const measureFrom = performance.now() + WARM * 1000;
  const measureFromEpoch = Date.now() + WARM * 1000;
  const deadline = measureFrom + SECONDS * 1000;
  const run = randomBytes(4).toString('hex');
  let failures = 0;
  let sent = 0;
  const loop = (who: 'a' | 'b') => async (): Promise<void> => {
    while (performance.now() < deadline) {
      await streamChat(stack.baseUrl, 'bench', TOKENS, {
        apiKey: keys[who],
        requestId: `${who}-${run}-${++sent}`,
      }).catch(() => failures++);
    }
  };
  await Promise.all([
    ...Array.from({ length: B_STREAMS }, loop('b')),
    ...(withA ? Array.from({ length: A_STREAMS }, loop('a')) : []),
  ]);
  await finished.stop();
  const seconds = (performance.now() - measureFrom) / 1000;
  // Requests that ended inside the measured window (one started in the warm-up counts: it waited then).
  const of = (who: string): RequestFinishedEvent[] =>
    finished.messages.filter(
      (e) => e.requestId.startsWith(`${who}-${run}-`) && e.usage && e.timings && e.finishedAt >= measureFromEpoch,
    );
  const [a, b] = [of('a'), of('b')];
  const waits = (events: RequestFinishedEvent[]): number[] => events.map((e) => e.timings?.queueMs ?? 0);
  const tokens = (events: RequestFinishedEvent[]): number =>
    events.reduce((sum, e) => sum + (e.usage?.completionTokens ?? 0), 0);
  return {
    name,
    bRequests: b.length,
    bP50: percentile(waits(b), 50),
    bP95: percentile(waits(b), 95),
    bTokPerS: tokens(b) / seconds,
    aRequests: a.length,
    aP50: percentile(waits(a), 50),
    aTokPerS: tokens(a) / seconds,
    failures,
  };
}

function table(arms: Arm[]): void {
  log(
    'arm                          B requests   B wait p50 ms   B wait p95 ms   B tok/s   A requests   A wait p50 ms   A tok/s   failures',
  );
  for (const arm of arms) {
    log(
      `${arm.name.padEnd(27)}  ${String(arm.bRequests).padStart(10)}   ${arm.bP50.toFixed(0).padStart(13)}   ${arm.bP95.toFixed(0).padStart(13)}   ${arm.bTokPerS.toFixed(0).padStart(7)}   ${String(arm.aRequests).padStart(10)}   ${arm.aP50.toFixed(0).padStart(13)}   ${arm.aTokPerS.toFixed(0).padStart(7)}   ${String(arm.failures).padStart(8)}`,
    );
  }
}

async function main(): Promise<void> {
  log(`cortex fairness bench — ${new Date().toISOString()}`);
  log(
    `machine: ${cpus()[0]?.model ?? 'unknown cpu'} × ${cpus().length}, ${Math.round(totalmem() / 2 ** 30)} GiB, node ${process.version}`,
  );
  log(
    `settings: ${MODEL}, ${SLOTS} slots, ${TOKENS} tokens per request, A ${A_STREAMS} streams, B ${B_STREAMS}, ${THREADS} thread(s), ${WARM} s warm-up + ${SECONDS} s per arm, ${ROUNDS} round(s)`,
  );
  for (let round = 1; round <= ROUNDS; round++) {
    const fair = await withStack('fair', async (stack, keys) => [
      await runArm(stack, '(a) B alone, fair', keys, false),
      await runArm(stack, '(b) B beside A, fair', keys, true),
    ]);
    const fifo = await withStack('fifo', async (stack, keys) => [
      await runArm(stack, '(c) B beside A, fifo', keys, true),
    ]);
    const arms = [...fair, ...fifo];
    log(`\nround ${round}`);
    table(arms);
    const [, withFair, withFifo] = arms as [Arm, Arm, Arm];
    log(
      `\nround ${round}: B's wait beside A, fifo / fair: p50 ${(withFifo.bP50 / Math.max(withFair.bP50, 1e-9)).toFixed(1)}×, p95 ${(withFifo.bP95 / Math.max(withFair.bP95, 1e-9)).toFixed(1)}×`,
    );
  }
}

main().catch((error: Error) => {
  console.error(`bench failed: ${error.stack ?? error.message}`);
  process.exit(1);
});
