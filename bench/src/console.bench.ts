/**
 * `npm run bench:console`: what the web console costs inference. One stack, streamed chat completions
 * in alternating runs: with no console page open (the gateway's console feed stopped: nothing
 * subscribed, no timers) and with one page's feed open (`/admin/console/feed`, read as fast as it
 * comes, as a browser would). Each watched run is paired with the unwatched run before it.
 *
 * Options (env): BENCH_THREADS (1), BENCH_TOKENS (512), BENCH_RUNS (7), BENCH_MODEL (a GGUF path;
 * default ../shared/models/stories260K.gguf).
 */
import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { startStack, STORIES_260K } from '@cortex/testing';
import { SocketClient } from './socket-client.js';
import type { StreamTiming } from './sse-load.js';

const THREADS = Number(process.env.BENCH_THREADS ?? 1);
const TOKENS = Number(process.env.BENCH_TOKENS ?? 512);
const RUNS = Number(process.env.BENCH_RUNS ?? 7);
const MODEL = process.env.BENCH_MODEL ?? STORIES_260K;
/** Longer than the feed's linger after the last page leaves (5 s), so an unwatched run has no feed. */
const FEED_GONE_MS = 6_000;

const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? 0;
const rate = (run: StreamTiming): number => (run.tokens > 1 ? ((run.tokens - 1) * 1000) / run.decodeMs : 0);
const sleep = (ms: number): Promise<void> => new Promise((done) => setTimeout(done, ms));
const log = (line: string): void => console.log(line);

/** A page's feed: opened, drained as it arrives, closed. Resolves once the snapshot came. */
async function openFeed(baseUrl: string): Promise<{ bytes: () => number; close: () => void }> {
  const controller = new AbortController();
  const response = await fetch(`${baseUrl}/admin/console/feed`, { signal: controller.signal });
  if (!response.ok || !response.body) throw new Error(`feed: HTTP ${response.status}`);
  const reader = response.body.getReader();
  let bytes = 0;
  let text = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error('feed ended before its snapshot');
    bytes += value.byteLength;
    text += new TextDecoder().decode(value);
    if (text.includes('event: snapshot')) break;
  }
  void (async () => {
    for (;;) {
      const { value, done } = await reader.read().catch(() => ({ value: undefined, done: true }));
      if (done) return;
      bytes += value?.byteLength ?? 0;
    }
  })();
  return { bytes: () => bytes, close: () => controller.abort() };
}

async function main(): Promise<void> {
  if (!existsSync(MODEL)) throw new Error(`no model at ${MODEL}: set BENCH_MODEL to a GGUF file`);
  log(`cortex console bench — ${new Date().toISOString()}`);
  log(
    `machine: ${cpus()[0]?.model ?? 'unknown cpu'} × ${cpus().length}, ${Math.round(totalmem() / 2 ** 30)} GiB, node ${process.version}`,
  );
  log(`settings: ${MODEL.split('/').pop()}, threads ${THREADS}, ${TOKENS} tokens per run, ${RUNS} pairs\n`);
  const stack = await startStack({
    models: [{ id: 'bench', file: MODEL, context_size: 2048, slots: 1, pinned: true }],
    config: { worker: { threads: THREADS }, gateway: { stream_idle_timeout_ms: 30_000 } },
  });
  const client = await SocketClient.open(stack.baseUrl);
  const run = (): Promise<StreamTiming> =>
    client.streamChat('bench', TOKENS, {
      prompt: 'Once upon a time',
      requestId: `bench-${randomBytes(6).toString('hex')}`,
    });
  try {
    for (let i = 0; i < 3; i++) await run();
    const unwatched: StreamTiming[] = [];
    const watched: StreamTiming[] = [];
    let feedBytes = 0;
    for (let i = 0; i < RUNS; i++) {
      log(`  pair ${i + 1}/${RUNS}…`);
      await sleep(FEED_GONE_MS);
      unwatched.push(await run());
      const feed = await openFeed(stack.baseUrl);
      await sleep(300);
      const before = feed.bytes();
      watched.push(await run());
      await sleep(300);
      feedBytes += feed.bytes() - before;
      feed.close();
    }
    const tps = watched.map((w, i) => rate(w) / rate(unwatched[i]!));
    const ttft = watched.map((w, i) => w.ttftMs / unwatched[i]!.ttftMs);
    log('\n                      no page      page watching   watched/unwatched (range)');
    log(
      `decode tok/s     ${median(unwatched.map(rate)).toFixed(0).padStart(10)}   ${median(watched.map(rate)).toFixed(0).padStart(14)}   ${median(tps).toFixed(3)} (${Math.min(...tps).toFixed(2)}–${Math.max(...tps).toFixed(2)})`,
    );
    log(
      `TTFT ms          ${median(unwatched.map((r) => r.ttftMs))
        .toFixed(2)
        .padStart(10)}   ${median(watched.map((r) => r.ttftMs))
        .toFixed(2)
        .padStart(14)}   ${median(ttft).toFixed(3)} (${Math.min(...ttft).toFixed(2)}–${Math.max(...ttft).toFixed(2)})`,
    );
    log(`feed bytes per watched request: ${Math.round(feedBytes / RUNS)}`);
  } finally {
    client.close();
    await stack.stop();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
