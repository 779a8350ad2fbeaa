/**
 * `npm run bench:gateway`: what a user feels. A streamed chat completion through the whole stack
 * (HTTP → decode → placement → worker → NATS → gateway → SSE), timed by the client on the socket,
 * and a streamed, unstored Responses request the same way (time to first token only),
 * against node-llama-cpp's raw `sequence.evaluate` loop in this process on the same model file,
 * threads and context; runs alternate so drift hits both alike. Time to first token is split by hop
 * with the timings the services report in their request-finished event.
 *
 * The worker has the bench's prompt cached after the first run and evaluates only its last token, so
 * the time to first token is compared with a raw loop that does the same (`reusePrefix`); the raw
 * loop that evaluates the whole prompt each time is printed beside it, and sets the decode ratio.
 *
 * Options (env): BENCH_THREADS (1), BENCH_TOKENS (512), BENCH_RUNS (9), BENCH_PAUSE (ms idle before
 * each run, 50), BENCH_MODEL (a GGUF path; default ../shared/models/stories260K.gguf).
 */
import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { decodeRequestFinished, Subjects, type RequestFinishedEvent } from '@cortex/contracts';
import { startStack, STORIES_260K } from '@cortex/testing';
import { RawBaseline, type DecodeRun } from './raw-baseline.js';
import { SocketClient } from './socket-client.js';
import type { StreamTiming } from './sse-load.js';
import { TransportFloor } from './transport-floor.js';

const THREADS = Number(process.env.BENCH_THREADS ?? 1);
const TOKENS = Number(process.env.BENCH_TOKENS ?? 512);
const RUNS = Number(process.env.BENCH_RUNS ?? 9);
const PAUSE = Number(process.env.BENCH_PAUSE ?? 50);
const MODEL = process.env.BENCH_MODEL ?? STORIES_260K;
const CONTEXT = 2048;
const PROMPT = 'Once upon a time';

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? 0;
};
/** `median (first quartile–third quartile)`, in ms. */
const spread = (values: number[]): string => {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number): string => (sorted[Math.floor((sorted.length - 1) * q)] ?? 0).toFixed(2);
  return `${median(values).toFixed(2)} (${at(0.25)}–${at(0.75)})`;
};
const pause = (): Promise<void> => new Promise((done) => setTimeout(done, PAUSE));
const log = (line: string): void => console.log(line);
const rate = (run: StreamTiming): number => (run.tokens > 1 ? ((run.tokens - 1) * 1000) / run.decodeMs : 0);

async function main(): Promise<void> {
  if (!existsSync(MODEL)) throw new Error(`no model at ${MODEL}: set BENCH_MODEL to a GGUF file`);
  log(`cortex gateway bench — ${new Date().toISOString()}`);
  log(
    `machine: ${cpus()[0]?.model ?? 'unknown cpu'} × ${cpus().length}, ${Math.round(totalmem() / 2 ** 30)} GiB, node ${process.version}`,
  );
  log(
    `settings: ${MODEL.split('/').pop()}, threads ${THREADS}, context ${CONTEXT}, ${TOKENS} tokens per run, ${RUNS} runs, ${PAUSE} ms idle before each\n`,
  );
  log('starting NATS and every service (one CPU worker)…');
  const stack = await startStack({
    models: [{ id: 'bench', file: MODEL, context_size: CONTEXT, slots: 1, pinned: true }],
    // A request's path takes a few milliseconds: sampled every 100 µs, not the default 1 ms.
    ...(process.env.BENCH_PROFILE && {
      nodeArgs: ['--cpu-prof', '--cpu-prof-interval', '100', '--cpu-prof-dir', process.env.BENCH_PROFILE],
    }),
    config: { worker: { threads: THREADS }, gateway: { stream_idle_timeout_ms: 30_000 } },
  });
  const finished = new Map<string, RequestFinishedEvent>();
  const sub = stack.nc.subscribe(Subjects.requestFinished, {
    callback: (_error, msg) => {
      const event = decodeRequestFinished(msg.json());
      finished.set(event.requestId, event);
    },
  });
  const baseline = await RawBaseline.open({
    path: MODEL,
    contextSize: CONTEXT,
    threads: THREADS,
    prompt: PROMPT,
    gpu: 'cpu',
  });
  const reusing = await RawBaseline.open({
    path: MODEL,
    contextSize: CONTEXT,
    threads: THREADS,
    prompt: PROMPT,
    gpu: 'cpu',
    reusePrefix: true,
  });
  const client = await SocketClient.open(stack.baseUrl);
  const floor = await TransportFloor.start(stack.nats.url);
  const floorClient = await SocketClient.open(floor.baseUrl);
  try {
    const raw: DecodeRun[] = [];
    const rawReused: DecodeRun[] = [];
    const runs: Array<StreamTiming & { event: RequestFinishedEvent | undefined }> = [];
    const floorRuns: StreamTiming[] = [];
    const httpFloorRuns: StreamTiming[] = [];
    const viaFloor = (requestId: 'bus' | 'http-only'): Promise<StreamTiming> =>
      floorClient.streamChat('floor', 1, { prompt: PROMPT, requestId });
    const responsesRuns: StreamTiming[] = [];
    const viaCortex = async (
      api: 'chat' | 'responses' = 'chat',
    ): Promise<StreamTiming & { event: RequestFinishedEvent | undefined }> => {
      const requestId = `bench-${randomBytes(6).toString('hex')}`;
      const ask = { prompt: PROMPT, requestId };
      const timing = await (api === 'chat'
        ? client.streamChat('bench', TOKENS, ask)
        : client.streamResponses('bench', TOKENS, ask));
      await stack.nc.flush();
      for (let i = 0; i < 50 && !finished.has(requestId); i++) await new Promise((done) => setTimeout(done, 10));
      return { ...timing, event: finished.get(requestId) };
    };
    log('warming up (3 runs each)…');
    for (let i = 0; i < 3; i++) {
      await baseline.run(TOKENS);
      await reusing.run(TOKENS);
      await viaCortex();
      await viaCortex('responses');
      await viaFloor('bus');
      await viaFloor('http-only');
    }
    for (let i = 0; i < RUNS; i++) {
      log(`  run ${i + 1}/${RUNS}…`);
      await pause();
      raw.push(await baseline.run(TOKENS));
      await pause();
      rawReused.push(await reusing.run(TOKENS));
      await pause();
      runs.push(await viaCortex());
      await pause();
      responsesRuns.push(await viaCortex('responses'));
      await pause();
      floorRuns.push(await viaFloor('bus'));
      await pause();
      httpFloorRuns.push(await viaFloor('http-only'));
    }
    const ratios = runs.map((run, i) => rate(run) / (raw[i]?.tokensPerSecond ?? Infinity));
    log('\ndecode, single stream (tokens after the first; cortex timed on the client socket)');
    log('raw tok/s   cortex tok/s   ratio   (range)      tokens per run');
    log(
      `${median(raw.map((r) => r.tokensPerSecond))
        .toFixed(0)
        .padStart(
          9,
        )}   ${median(runs.map(rate)).toFixed(0).padStart(12)}   ${median(ratios).toFixed(3)}   (${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)})   raw ${raw[0]?.tokens}, cortex ${runs[0]?.tokens}`,
    );
    // The worker's own clock (first token → finish) beside the client's: a gap between the two is the delivery, not the decode.
    const own = runs.flatMap((run, i) =>
      run.event?.timings && raw[i] ? [run.event.timings.decodeTokensPerSecond / raw[i].tokensPerSecond] : [],
    );
    if (own.length > 0)
      log(
        `the worker's own measure: ratio ${median(own).toFixed(3)} (${Math.min(...own).toFixed(2)}–${Math.max(...own).toFixed(2)}); the prefix-keeping raw loop: ${median(rawReused.map((r) => r.tokensPerSecond)).toFixed(0)} tok/s`,
      );
    const ttft = median(runs.map((r) => r.ttftMs));
    const rawTtft = median(raw.map((r) => r.ttftMs));
    const reusedTtft = median(rawReused.map((r) => r.ttftMs));
    log('\ntime to first token, medians (ms)');
    log(`raw loop, whole prompt evaluated (evaluate() → first token)          ${rawTtft.toFixed(2).padStart(7)}`);
    log(`raw loop, cached prefix kept, as the worker does (trim → first token) ${reusedTtft.toFixed(2).padStart(7)}`);
    log(`through cortex (request written → first content byte)                 ${ttft.toFixed(2).padStart(7)}`);
    log(
      `overhead over the like-for-like raw loop (cached prefix)              ${(ttft - reusedTtft).toFixed(2).padStart(7)}`,
    );
    // The least any request costs here: the same client, processes as idle, no work in them.
    const floorTtft = median(floorRuns.map((r) => r.ttftMs));
    const httpFloorTtft = median(httpFloorRuns.map((r) => r.ttftMs));
    log(
      `transport floor, HTTP only (an idle process answers at once)           ${httpFloorTtft.toFixed(2).padStart(7)}`,
    );
    log(`transport floor, cortex's crossings (HTTP in, NATS to another and back) ${floorTtft.toFixed(2).padStart(7)}`);
    log(
      `cortex's own work (overhead − cortex's crossings)                      ${(ttft - reusedTtft - floorTtft).toFixed(2).padStart(7)}`,
    );
    const responsesTtft = median(responsesRuns.map((r) => r.ttftMs));
    log(
      `Responses, unstored, through cortex (request written → first text delta) ${responsesTtft.toFixed(2).padStart(7)}`,
    );
    log(
      `Responses: cortex's own work (overhead − cortex's crossings)           ${(responsesTtft - reusedTtft - floorTtft).toFixed(2).padStart(7)}`,
    );
    // The same, round by round: each round's cortex request less that round's raw loop and floor, so
    // drift between the rounds (the VM's other tenants, a slower phase) cancels within each.
    const ownPerRound = (of: StreamTiming[]): number[] =>
      of.flatMap((run, i) => {
        const reused = rawReused[i];
        const crossing = floorRuns[i];
        return reused && crossing ? [run.ttftMs - reused.ttftMs - crossing.ttftMs] : [];
      });
    log(
      `own work round by round, median (quartiles): chat ${spread(ownPerRound(runs))}, Responses ${spread(ownPerRound(responsesRuns))}`,
    );
    const hops = runs.flatMap((r) =>
      r.event?.timings ? [{ client: r.ttftMs, event: r.event, timings: r.event.timings }] : [],
    );
    if (hops.length === 0) {
      log('(no request-finished events seen: no split by hop)');
      return;
    }
    const row = (name: string, values: number[]): void =>
      log(`  ${name.padEnd(56)} ${median(values).toFixed(2).padStart(7)}`);
    const split = hops.flatMap((h) => (h.event.hops ? [{ ...h, hops: h.event.hops }] : []));
    log(
      `split by hop, medians of ${split.length} runs (ms; the services' own timings from each request-finished event):`,
    );
    const gatewayTotal = (h: (typeof split)[number]): number =>
      h.hops.parseMs + h.hops.decodeMs + placeWait(h) + h.hops.generateMs + h.hops.firstEventMs + h.hops.writeMs;
    // A chat body decodes in the gateway; a placement is reused while only one worker holds the model,
    // else asked of the router (for Responses, while the translator decodes).
    const placeWait = (h: (typeof split)[number]): number => h.hops.placeMs ?? h.event.placeMs ?? 0;
    row(
      'client ↔ gateway sockets (client TTFT − gateway total)',
      split.map((h) => h.client - gatewayTotal(h)),
    );
    row(
      'gateway: HTTP parse, access checks',
      split.map((h) => h.hops.parseMs),
    );
    row(
      'gateway: decode the body',
      split.map((h) => h.hops.decodeMs),
    );
    row("placement (reused, or the router's round trip)", split.map(placeWait));
    row(
      'worker: generate hand-off (sent → accepted)',
      split.map((h) => h.hops.generateMs),
    );
    row(
      'worker: template + tokenize + a free sequence',
      split.map((h) => h.timings.queueMs),
    );
    row(
      'worker: cached prefix trimmed',
      split.map((h) => h.timings.ttftMs - h.timings.promptMs - h.timings.queueMs),
    );
    row(
      'worker: prompt evaluation → first token',
      split.map((h) => h.timings.promptMs),
    );
    row(
      'bus: first token → gateway (first event − worker TTFT)',
      split.map((h) => h.hops.firstEventMs - h.timings.ttftMs),
    );
    row(
      'gateway: first event → first byte on the socket',
      split.map((h) => h.hops.writeMs),
    );
  } finally {
    sub.unsubscribe();
    client.close();
    floorClient.close();
    floor.stop();
    await reusing.close();
    await baseline.close();
    await stack.stop();
  }
}

main().catch((error: Error) => {
  console.error(`bench failed: ${error.stack ?? error.message}`);
  process.exit(1);
});
