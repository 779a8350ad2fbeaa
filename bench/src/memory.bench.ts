/**
 * `npm run bench:memory`: one worker serving `cortex-chat` (2,048-token context, 4 sequences) under
 * 64 closed-loop streams in three dialects (Chat Completions, Messages, Responses, in turn), with the
 * worker's resident memory sampled once a second from /proc: at idle after the model loaded, after
 * 30 s of load, and at the end. Arms run one after another in the same run, each on a fresh stack, so
 * their ratios compare like with like:
 *
 * - `default`: the worker as shipped (`worker.native_gc_mb: 64`);
 * - `gc-off`: `worker.native_gc_mb: 0`, the worker before it asked V8 for collections (NativeGarbage);
 * - `bytes`: gc off and the byte-level fixture vocabulary (`fixture:cortex-chat:bytes`, 256 tokens
 *   instead of the word vocabulary's thousands): what the vocabulary costs per generation;
 * - `arena2` (on request): gc off with `MALLOC_ARENA_MAX=2` (glibc gives every thread that allocates its
 *   own arena, up to 8 per core): whether allocator arenas hold the memory.
 *
 * Options (env): BENCH_ARMS (comma list, default `default,gc-off,bytes`), BENCH_SECONDS (load per arm,
 * 60; the figure wants 300), BENCH_STREAMS (64), BENCH_TOKENS (per request, 64).
 */
import 'reflect-metadata';
import { readFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { performance } from 'node:perf_hooks';
import { postJson, startStack } from '@cortex/testing';

const ARMS = (process.env.BENCH_ARMS ?? 'default,gc-off,bytes').split(',');
const SECONDS = Number(process.env.BENCH_SECONDS ?? 60);
const STREAMS = Number(process.env.BENCH_STREAMS ?? 64);
const TOKENS = Number(process.env.BENCH_TOKENS ?? 64);
const log = (line: string): void => console.log(line);

/** The worker's environment per arm. */
const ARM_ENV: Record<string, Record<string, string>> = { arena2: { MALLOC_ARENA_MAX: '2' } };

interface Arm {
  name: string;
  idleMb: number;
  at30Mb: number | null;
  endMb: number;
  maxMb: number;
  anonEndMb: number;
  requests: number;
  failures: number;
}

/** Resident and anonymous memory of a process, in MiB, from /proc/<pid>/status. */
function residentMb(pid: number): { rss: number; anon: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string): number => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0);
  return { rss: kb('VmRSS') / 1024, anon: kb('RssAnon') / 1024 };
}

/** One request in the dialect of turn `n`, streamed, read to its end. */
async function oneRequest(baseUrl: string, n: number): Promise<boolean> {
  const prompt = `Tell me a story about request ${n}.`;
  const [path, body] =
    n % 3 === 0
      ? [
          '/v1/chat/completions',
          { model: 'cortex-chat', stream: true, max_tokens: TOKENS, messages: [{ role: 'user', content: prompt }] },
        ]
      : n % 3 === 1
        ? [
            '/v1/messages',
            { model: 'cortex-chat', stream: true, max_tokens: TOKENS, messages: [{ role: 'user', content: prompt }] },
          ]
        : [
            '/v1/responses',
            { model: 'cortex-chat', stream: true, max_output_tokens: TOKENS, store: false, input: prompt },
          ];
  const response = await postJson(`${baseUrl}${path}`, body, { 'anthropic-version': '2023-06-01' });
  await response.text();
  return response.ok;
}

async function runArm(name: string): Promise<Arm> {
  log(`\n${name}: starting NATS, gateway, translator, router and one worker…`);
  const stack = await startStack({
    services: ['router', 'translator', 'worker', 'gateway'],
    models: [
      {
        id: 'cortex-chat',
        file: name === 'bytes' ? 'fixture:cortex-chat:bytes' : 'fixture:cortex-chat',
        context_size: 2048,
        slots: 4,
        pinned: true,
      },
    ],
    config: {
      worker: { threads: 1, max_queue: 256, native_gc_mb: name === 'default' ? 64 : 0 },
      gateway: { stream_idle_timeout_ms: 60_000 },
      log_level: 'warn',
    },
    serviceEnv: { worker: ARM_ENV[name] ?? {} },
  });
  try {
    const pid = stack.processes.get('worker')?.pid;
    if (!pid) throw new Error('the worker did not start');
    await oneRequest(stack.baseUrl, 0);
    const idle = residentMb(pid).rss;
    log(`  idle with the model loaded: ${idle.toFixed(0)} MiB; ${STREAMS} streams for ${SECONDS} s…`);
    const started = performance.now();
    const deadline = started + SECONDS * 1000;
    let at30: number | null = null;
    let max = idle;
    const sampler = setInterval(() => {
      const { rss } = residentMb(pid);
      max = Math.max(max, rss);
      if (at30 === null && performance.now() - started >= 30_000) at30 = rss;
    }, 1_000);
    let requests = 0;
    let failures = 0;
    let turn = 0;
    await Promise.all(
      Array.from({ length: STREAMS }, async () => {
        while (performance.now() < deadline) {
          const ok = await oneRequest(stack.baseUrl, turn++).catch(() => false);
          if (ok) requests++;
          else failures++;
        }
      }),
    );
    clearInterval(sampler);
    const end = residentMb(pid);
    log(
      `  after: ${end.rss.toFixed(0)} MiB (anonymous ${end.anon.toFixed(0)}), most ${max.toFixed(0)}; ${requests} requests, ${failures} failed`,
    );
    return {
      name,
      idleMb: idle,
      at30Mb: at30,
      endMb: end.rss,
      maxMb: Math.max(max, end.rss),
      anonEndMb: end.anon,
      requests,
      failures,
    };
  } finally {
    await stack.stop();
  }
}

const arms: Arm[] = [];
for (const name of ARMS) arms.push(await runArm(name));
const cpu = cpus()[0]?.model ?? 'unknown CPU';
log(
  `\n${new Date().toISOString().slice(0, 10)}, ${cpus().length} × ${cpu}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.versions.node}; ${STREAMS} streams, ${SECONDS} s per arm, ${TOKENS} tokens per request`,
);
log('| arm | idle MiB | after 30 s | at the end | most | end / idle | anonymous at the end | requests (failed) |');
log('|---|---|---|---|---|---|---|---|');
for (const arm of arms) {
  const at30 = arm.at30Mb === null ? '—' : arm.at30Mb.toFixed(0);
  log(
    `| ${arm.name} | ${arm.idleMb.toFixed(0)} | ${at30} | ${arm.endMb.toFixed(0)} | ${arm.maxMb.toFixed(0)} | ${(arm.endMb / arm.idleMb).toFixed(2)}× | ${arm.anonEndMb.toFixed(0)} | ${arm.requests} (${arm.failures}) |`,
  );
}
