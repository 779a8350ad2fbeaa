/**
 * `npm run bench:prefix`: how much of an agent's already-sent conversation the worker reuses when
 * several conversations take turns on one model. Each conversation re-sends its whole history plus
 * a new user message every turn (as coding agents do); they take turns round robin on a model with 2
 * and then 4 slots. For each, the share of already-sent prompt tokens that a turn found evaluated
 * (`cachedPromptTokens` of turns 2 and later over the previous turn's prompt), and the time per turn,
 * with the slot choice before (`longest`: the sequence sharing the longest prefix), now (`similar`:
 * see slot-choice.decider.ts), and now with the worker's prompt cache beyond the slots (`cached`: see
 * prompt-cache.ts, in /dev/shm), in this one run and process, one after another for each row.
 *
 * Then a soak: BENCH_SOAK_CONVERSATIONS (64) conversations take turns for BENCH_SOAK_S (30) seconds on a
 * 2-slot model, two requests at a time, with a prompt cache of BENCH_SOAK_CACHE_MB (4, so that it
 * fills and evicts); it samples the cache's own count, the bytes its directory holds and the
 * process's RSS every 100 ms, and reports their peaks against the configured size.
 *
 * Options (env): BENCH_THREADS (1), BENCH_TURNS (5), BENCH_NEW_WORDS (400: one token each, per turn),
 * BENCH_CONVERSATIONS (1,2,6,12), BENCH_SLOTS (2,4; empty: the soak alone), BENCH_CACHE_MB (1024: the prompt cache's size),
 * BENCH_SOAK_S (30; 0: no soak), BENCH_SOAK_CONVERSATIONS (64), BENCH_SOAK_CACHE_MB (4).
 */
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { getModuleVersion } from 'node-llama-cpp';
import type { CanonicalMessage, CanonicalRequest } from '@cortex/contracts';
import { ensureFixtureModels, FIXTURE_WORDS } from '@cortex/fixtures';
import { LlamaEngine } from '../../apps/worker/dist/engine/llama-engine.js';
import { defaultPromptCacheDir } from '../../apps/worker/dist/engine/prompt-cache.js';
import type { EngineEvent } from '../../apps/worker/dist/engine/engine.types.js';

const THREADS = Number(process.env.BENCH_THREADS ?? 1);
const TURNS = Number(process.env.BENCH_TURNS ?? 5);
const NEW_WORDS = Number(process.env.BENCH_NEW_WORDS ?? 400);
const CONVERSATIONS = (process.env.BENCH_CONVERSATIONS ?? '1,2,6,12').split(',').map(Number).filter(Boolean);
const SLOTS = (process.env.BENCH_SLOTS ?? '2,4').split(',').map(Number).filter(Boolean);
const CACHE_MB = Number(process.env.BENCH_CACHE_MB ?? 1024);
const SOAK_S = Number(process.env.BENCH_SOAK_S ?? 30);
const SOAK_CONVERSATIONS = Number(process.env.BENCH_SOAK_CONVERSATIONS ?? 64);
const SOAK_CACHE_MB = Number(process.env.BENCH_SOAK_CACHE_MB ?? 4);
const POLICIES = ['longest', 'similar', 'cached'] as const;
type Policy = (typeof POLICIES)[number];
const log = (line: string): void => console.log(line);
const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? 0;

/** Words of one conversation's turn: its own sequence of fixture words (one token each), so conversations share nothing past the system prompt. */
function words(conversation: number, turn: number, count: number): string {
  let seed = (conversation + 1) * 7_919 + turn * 104_729;
  const out: string[] = [];
  for (let i = 0; i < count; i++) {
    seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
    out.push(FIXTURE_WORDS[seed % FIXTURE_WORDS.length] as string);
  }
  return out.join(' ');
}

const SYSTEM = `You are a coding agent. ${words(-1, 0, 120)}`;

interface Result {
  /** Cached prompt tokens of turns 2 and later, and the prompt tokens their conversation had sent the turn before. */
  reused: number;
  sent: number;
  /** Milliseconds per turn, turns 2 and later. */
  ms: number[];
}

async function run(
  engine: LlamaEngine,
  path: string,
  slots: number,
  conversations: number,
  policy: Policy,
): Promise<Result> {
  const contextSize = 1024 + TURNS * (NEW_WORDS + 64);
  const model = await engine.load({
    id: 'cortex-chat',
    path,
    contextSize,
    slots,
    maxQueue: 64,
    slotChoice: policy === 'longest' ? 'longest' : 'similar',
    keepPrompts: policy === 'cached',
  });
  const histories: CanonicalMessage[][] = Array.from({ length: conversations }, () => [
    { role: 'system', content: SYSTEM },
  ]);
  const lastPrompt = new Array<number>(conversations).fill(0);
  const result: Result = { reused: 0, sent: 0, ms: [] };
  try {
    for (let turn = 0; turn < TURNS; turn++) {
      for (let c = 0; c < conversations; c++) {
        const history = histories[c] as CanonicalMessage[];
        history.push({ role: 'user', content: words(c, turn, NEW_WORDS) });
        const request: CanonicalRequest = {
          model: 'cortex-chat',
          messages: history,
          sampling: { temperature: 0, maxTokens: 8 },
          stream: true,
        };
        const events: EngineEvent[] = [];
        const started = performance.now();
        await model.generate({
          request,
          receivedAt: started,
          signal: new AbortController().signal,
          emit: (event) => events.push(event),
        });
        const ms = performance.now() - started;
        const finish = events.find((event) => event.type === 'finish');
        if (finish?.type !== 'finish')
          throw new Error(`turn ${turn} of conversation ${c} did not finish: ${JSON.stringify(events.at(-1))}`);
        const text = events.flatMap((event) => (event.type === 'text' ? [event.text] : [])).join('');
        history.push({ role: 'assistant', content: text });
        if (turn > 0) {
          result.reused += finish.usage.cachedPromptTokens;
          result.sent += lastPrompt[c] as number;
          result.ms.push(ms);
        }
        lastPrompt[c] = finish.usage.promptTokens;
      }
    }
  } finally {
    await model.dispose();
  }
  return result;
}

/** Bytes of the files under `dir` (the prompt cache's store), as the directory holds them now. */
function bytesUnder(dir: string): number {
  let total = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (!entry.isFile()) continue;
    try {
      total += statSync(join(entry.parentPath, entry.name)).size;
    } catch {
      // Dropped between the listing and the stat.
    }
  }
  return total;
}

/**
 * SOAK_CONVERSATIONS conversations taking turns for SOAK_S seconds, two requests at a time, on a
 * 2-slot model whose worker keeps prompts in a SOAK_CACHE_MB cache: the cache's bytes (its count and
 * its directory's) and the process's RSS, sampled every 100 ms, against the configured size.
 */
async function soak(path: string): Promise<void> {
  const cacheDir = mkdtempSync(join(defaultPromptCacheDir(), 'cortex-bench-soak-'));
  const maxBytes = SOAK_CACHE_MB * 2 ** 20;
  const engine = await LlamaEngine.create({
    gpu: 'cpu',
    threads: THREADS,
    promptCache: { dir: cacheDir, maxBytes },
    log: () => undefined,
  });
  const newWords = 100;
  const contextSize = 4096;
  const model = await engine.load({ id: 'cortex-chat', path, contextSize, slots: 2, maxQueue: 64 });
  const peak = { counted: 0, onDisk: 0, rss: 0 };
  const rssBefore = process.memoryUsage.rss();
  const sample = (): void => {
    peak.counted = Math.max(peak.counted, engine.promptCacheUse()[0]?.bytes ?? 0);
    peak.onDisk = Math.max(peak.onDisk, bytesUnder(cacheDir));
    peak.rss = Math.max(peak.rss, process.memoryUsage.rss());
  };
  const sampler = setInterval(sample, 100);
  const histories: CanonicalMessage[][] = Array.from({ length: SOAK_CONVERSATIONS }, () => [
    { role: 'system', content: SYSTEM },
  ]);
  const lastPrompt = new Array<number>(SOAK_CONVERSATIONS).fill(0);
  const totals = { turns: 0, reused: 0, sent: 0, restarted: 0 };
  let next = 0;
  const ends = performance.now() + SOAK_S * 1000;
  const lane = async (): Promise<void> => {
    while (performance.now() < ends) {
      const c = next++ % SOAK_CONVERSATIONS;
      const history = histories[c] as CanonicalMessage[];
      // A conversation about to outgrow the context starts over (as an agent compacts its history).
      if ((lastPrompt[c] as number) > contextSize - 2 * (newWords + 64)) {
        history.splice(1);
        lastPrompt[c] = 0;
        totals.restarted++;
      }
      history.push({ role: 'user', content: words(c, history.length, newWords) });
      const events: EngineEvent[] = [];
      const request: CanonicalRequest = {
        model: 'cortex-chat',
        messages: history,
        sampling: { temperature: 0, maxTokens: 8 },
        stream: true,
      };
      await model.generate({
        request,
        receivedAt: performance.now(),
        signal: new AbortController().signal,
        emit: (event) => events.push(event),
      });
      const finish = events.find((event) => event.type === 'finish');
      if (finish?.type !== 'finish')
        throw new Error(`a soak turn of conversation ${c} did not finish: ${JSON.stringify(events.at(-1))}`);
      history.push({
        role: 'assistant',
        content: events.flatMap((event) => (event.type === 'text' ? [event.text] : [])).join(''),
      });
      if (lastPrompt[c]) {
        totals.reused += finish.usage.cachedPromptTokens;
        totals.sent += lastPrompt[c] as number;
      }
      lastPrompt[c] = finish.usage.promptTokens;
      totals.turns++;
    }
  };
  try {
    await Promise.all([lane(), lane()]);
    sample();
  } finally {
    clearInterval(sampler);
    await model.dispose();
    const stats = engine.promptCacheStats;
    await engine.dispose();
    rmSync(cacheDir, { recursive: true, force: true });
    const mib = (bytes: number): string => `${(bytes / 2 ** 20).toFixed(2)} MiB`;
    log(
      `\nsoak: ${SOAK_CONVERSATIONS} conversations taking turns for ${SOAK_S} s, two at a time, on 2 slots (context ${contextSize}), each turn adding ${newWords} words; prompt cache ${mib(maxBytes)}`,
    );
    log(
      `  ${totals.turns} turns (${totals.restarted} conversations started over at the context's end); reused ${((100 * totals.reused) / Math.max(1, totals.sent)).toFixed(1)} % of what follow-ups had sent`,
    );
    log(
      `  prompt cache: ${stats?.saved ?? 0} saved, ${stats?.restored ?? 0} restored, ${stats?.failed ?? 0} failed restores, ${stats?.dropped ?? 0} dropped; peak ${mib(peak.counted)} counted, ${mib(peak.onDisk)} in its directory, of ${mib(maxBytes)}`,
    );
    log(
      `  process RSS: ${mib(rssBefore)} before, ${mib(peak.rss)} at its peak, ${mib(process.memoryUsage.rss())} after`,
    );
  }
}

async function main(): Promise<void> {
  log(`cortex prefix bench — ${new Date().toISOString()}`);
  log(
    `machine: ${cpus()[0]?.model ?? 'unknown cpu'} × ${cpus().length}, ${Math.round(totalmem() / 2 ** 30)} GiB, node ${process.version}, node-llama-cpp ${await getModuleVersion()}, ${THREADS} thread(s)`,
  );
  log(
    `settings: cortex-chat, ${TURNS} turns per conversation taken round robin, each adding ${NEW_WORDS} words (one token each) to its history; a ${SYSTEM.split(' ').length}-word system prompt every conversation shares\n`,
  );
  const dir = mkdtempSync(join(tmpdir(), 'cortex-bench-prefix-'));
  const engine = await LlamaEngine.create({
    gpu: 'cpu',
    threads: THREADS,
    promptCache: { dir: defaultPromptCacheDir(), maxBytes: CACHE_MB * 2 ** 20 },
    log: () => undefined,
  });
  try {
    const path = (await ensureFixtureModels(dir))['cortex-chat'] as string;
    log(
      'reused: cached prompt tokens of turns 2+ over what their conversation had sent the turn before; ms: median per turn (turns 2+)',
    );
    log(
      'slots  conversations   reused: longest     similar      cached       ms/turn: longest  similar   cached   similar/longest  cached/longest',
    );
    const cacheLines: string[] = [];
    for (const slots of SLOTS) {
      for (const conversations of CONVERSATIONS) {
        const results = {} as Record<Policy, Result>;
        const before = engine.promptCacheStats;
        for (const policy of POLICIES) results[policy] = await run(engine, path, slots, conversations, policy);
        const after = engine.promptCacheStats;
        if (before && after && after.saved > before.saved) {
          const saved = after.saved - before.saved;
          const restored = after.restored - before.restored;
          cacheLines.push(
            `${String(slots).padStart(5)}  ${String(conversations).padStart(13)}   ${String(saved).padStart(5)} saved (${((after.savedBytes - before.savedBytes) / saved / 2 ** 20).toFixed(1)} MiB, ${((after.saveMs - before.saveMs) / saved).toFixed(1)} ms each)   ${String(restored).padStart(4)} restored (${restored > 0 ? ((after.restoreMs - before.restoreMs) / restored).toFixed(1) : '-'} ms each)`,
          );
        }
        const share = (r: Result): string => `${((100 * r.reused) / Math.max(1, r.sent)).toFixed(1).padStart(6)} %`;
        const ms = (policy: Policy): number => median(results[policy].ms);
        const ratio = (policy: Policy): string => (ms(policy) / Math.max(ms('longest'), 1e-9)).toFixed(2);
        log(
          `${String(slots).padStart(5)}  ${String(conversations).padStart(13)}   ${share(results.longest)}   ${share(results.similar)}   ${share(results.cached)}   ${ms('longest').toFixed(1).padStart(14)} ${ms('similar').toFixed(1).padStart(8)} ${ms('cached').toFixed(1).padStart(8)}   ${ratio('similar').padStart(15)} ${ratio('cached').padStart(15)}`,
        );
      }
    }
    log(
      '\nthe prompt cache in the `cached` arm: states saved before a sequence was overwritten, and restored for a conversation that came back',
    );
    for (const line of cacheLines) log(line);
    if (SOAK_S > 0) await soak(path);
  } finally {
    await engine.dispose();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
