/**
 * `npm run bench:upstream`: what cortex adds in front of an upstream. Two stacks, each with its own
 * NATS: the upstream serves a GGUF on a local worker; the front has only a remote worker and serves
 * that model as an upstream model, once per wire format it can speak to the upstream in (chat,
 * responses, messages). Each round sends the same streamed chat completion to the upstream directly
 * and through the front for each format, one at a time and in a rotating order, so every through /
 * direct pair ran under the same load. Reports, per format, the median time to first token and
 * decode tokens per second of each side and their paired ratios.
 *
 * Options (env): BENCH_MODEL (a GGUF; default stories260K from the shared models), BENCH_TOKENS (per
 * request, 64), BENCH_ROUNDS (100), BENCH_WARM (rounds not counted, 5), BENCH_THREADS (the upstream
 * worker's threads, 1), BENCH_APIS (comma list, chat,responses,messages).
 */
import 'reflect-metadata';
import { cpus, totalmem } from 'node:os';
import { startStack, STORIES_260K, type TestStack } from '@cortex/testing';
import { percentile, streamChat, type StreamTiming } from './sse-load.js';

const MODEL = process.env.BENCH_MODEL ?? STORIES_260K;
const TOKENS = Number(process.env.BENCH_TOKENS ?? 64);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 100);
const WARM = Number(process.env.BENCH_WARM ?? 5);
const THREADS = Number(process.env.BENCH_THREADS ?? 1);
const APIS = (process.env.BENCH_APIS ?? 'chat,responses,messages').split(',') as Array<
  'chat' | 'responses' | 'messages'
>;
const log = (line: string): void => console.log(line);

/** Decode speed as the client saw it: tokens after the first over the time after the first content. */
const tokPerS = (t: StreamTiming): number =>
  t.tokens > 1 && t.decodeMs > 0 ? (t.tokens - 1) / (t.decodeMs / 1000) : 0;
const median = (values: number[]): number => percentile(values, 50);

async function main(): Promise<void> {
  log(`cortex upstream bench — ${new Date().toISOString()}`);
  log(
    `machine: ${cpus()[0]?.model ?? 'unknown cpu'} × ${cpus().length}, ${Math.round(totalmem() / 2 ** 30)} GiB, node ${process.version}`,
  );
  log(
    `settings: ${MODEL}, ${TOKENS} tokens per request, ${ROUNDS} rounds (+${WARM} warm-up), upstream formats ${APIS.join(',')}, ${THREADS} thread(s)`,
  );
  log('starting the upstream stack (NATS, gateway, translator, router, a llama worker)…');
  let upstream: TestStack | undefined;
  let front: TestStack | undefined;
  try {
    upstream = await startStack({
      models: [{ id: 'bench', file: MODEL, context_size: 1024, slots: 2, pinned: true }],
      config: { worker: { threads: THREADS }, log_level: 'warn' },
    });
    log('starting the front stack (NATS, gateway, translator, router, a remote worker)…');
    front = await startStack({
      models: APIS.map((api) => ({
        id: `via-${api}`,
        upstream: { url: `${upstream!.baseUrl}/v1`, api, model: 'bench' },
      })),
      config: { log_level: 'warn' },
      serviceEnv: { worker: { CORTEX_WORKER_ENGINE: 'remote', CORTEX_WORKER_ID: 'remote-1' } },
    });
    const sides = [
      { name: 'direct', base: upstream.baseUrl, model: 'bench' },
      ...APIS.map((api) => ({ name: api, base: front!.baseUrl, model: `via-${api}` })),
    ];
    const timings = new Map<string, StreamTiming[]>(sides.map((s) => [s.name, []]));
    for (let round = 0; round < WARM + ROUNDS; round++) {
      // Rotated so no side always goes first (after an idle moment) or last.
      for (let i = 0; i < sides.length; i++) {
        const side = sides[(round + i) % sides.length]!;
        const timing = await streamChat(side.base, side.model, TOKENS);
        if (round >= WARM) timings.get(side.name)!.push(timing);
      }
      if ((round + 1) % 20 === 0) log(`  ${round + 1} of ${WARM + ROUNDS} rounds`);
    }
    const direct = timings.get('direct')!;
    const directTtft = median(direct.map((t) => t.ttftMs));
    const directTps = median(direct.map(tokPerS));
    log('');
    log(
      'path                      TTFT median ms   TTFT p95 ms   tok/s median   TTFT ratio   tok/s ratio   added TTFT ms',
    );
    log(
      `${'upstream called directly'.padEnd(24)}   ${directTtft.toFixed(1).padStart(14)}   ${percentile(
        direct.map((t) => t.ttftMs),
        95,
      )
        .toFixed(1)
        .padStart(
          11,
        )}   ${directTps.toFixed(0).padStart(12)}   ${'1.00'.padStart(10)}   ${'1.00'.padStart(11)}   ${'0'.padStart(13)}`,
    );
    for (const api of APIS) {
      const through = timings.get(api)!;
      // Paired: round r through / round r direct, then the median of those ratios.
      const ttftRatio = median(through.map((t, r) => t.ttftMs / direct[r]!.ttftMs));
      const tpsRatio = median(through.map((t, r) => tokPerS(t) / Math.max(tokPerS(direct[r]!), 1e-9)));
      const added = median(through.map((t, r) => t.ttftMs - direct[r]!.ttftMs));
      log(
        `${`through cortex (${api})`.padEnd(24)}   ${median(through.map((t) => t.ttftMs))
          .toFixed(1)
          .padStart(14)}   ${percentile(
          through.map((t) => t.ttftMs),
          95,
        )
          .toFixed(1)
          .padStart(11)}   ${median(through.map(tokPerS))
          .toFixed(0)
          .padStart(
            12,
          )}   ${ttftRatio.toFixed(2).padStart(10)}   ${tpsRatio.toFixed(2).padStart(11)}   ${added.toFixed(1).padStart(13)}`,
      );
    }
  } finally {
    await front?.stop();
    await upstream?.stop();
  }
}

main().catch((error: Error) => {
  console.error(`bench failed: ${error.stack ?? error.message}`);
  process.exit(1);
});
