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
 * Options (env): BENCH_THREADS (1), BENCH_TURNS (5), BENCH_NEW_WORDS (400: one token each, per turn),
 * BENCH_CONVERSATIONS (1,2,6,12), BENCH_SLOTS (2,4), BENCH_CACHE_MB (1024: the prompt cache's size).
 */
import { mkdtempSync, rmSync } from 'node:fs';
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
const CONVERSATIONS = (process.env.BENCH_CONVERSATIONS ?? '1,2,6,12').split(',').map(Number);
const SLOTS = (process.env.BENCH_SLOTS ?? '2,4').split(',').map(Number);
const CACHE_MB = Number(process.env.BENCH_CACHE_MB ?? 1024);
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

async function run(engine: LlamaEngine, path: string, slots: number, conversations: number, policy: Policy): Promise<Result> {
  const contextSize = 1024 + TURNS * (NEW_WORDS + 64);
  const model = await engine.load({ id: 'cortex-chat', path, contextSize, slots, maxQueue: 64, slotChoice: policy === 'longest' ? 'longest' : 'similar', keepPrompts: policy === 'cached' });
  const histories: CanonicalMessage[][] = Array.from({ length: conversations }, () => [{ role: 'system', content: SYSTEM }]);
  const lastPrompt = new Array<number>(conversations).fill(0);
  const result: Result = { reused: 0, sent: 0, ms: [] };
  try {
    for (let turn = 0; turn < TURNS; turn++) {
      for (let c = 0; c < conversations; c++) {
        const history = histories[c] as CanonicalMessage[];
        history.push({ role: 'user', content: words(c, turn, NEW_WORDS) });
        const request: CanonicalRequest = { model: 'cortex-chat', messages: history, sampling: { temperature: 0, maxTokens: 8 }, stream: true };
        const events: EngineEvent[] = [];
        const started = performance.now();
        await model.generate({ request, receivedAt: started, signal: new AbortController().signal, emit: (event) => events.push(event) });
        const ms = performance.now() - started;
        const finish = events.find((event) => event.type === 'finish');
        if (finish?.type !== 'finish') throw new Error(`turn ${turn} of conversation ${c} did not finish: ${JSON.stringify(events.at(-1))}`);
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

async function main(): Promise<void> {
  log(`cortex prefix bench — ${new Date().toISOString()}`);
  log(`machine: ${cpus()[0]?.model ?? 'unknown cpu'} × ${cpus().length}, ${Math.round(totalmem() / 2 ** 30)} GiB, node ${process.version}, node-llama-cpp ${await getModuleVersion()}, ${THREADS} thread(s)`);
  log(`settings: cortex-chat, ${TURNS} turns per conversation taken round robin, each adding ${NEW_WORDS} words (one token each) to its history; a ${SYSTEM.split(' ').length}-word system prompt every conversation shares\n`);
  const dir = mkdtempSync(join(tmpdir(), 'cortex-bench-prefix-'));
  const engine = await LlamaEngine.create({ gpu: 'cpu', threads: THREADS, promptCache: { dir: defaultPromptCacheDir(), maxBytes: CACHE_MB * 2 ** 20 }, log: () => undefined });
  try {
    const path = (await ensureFixtureModels(dir))['cortex-chat'] as string;
    log('reused: cached prompt tokens of turns 2+ over what their conversation had sent the turn before; ms: median per turn (turns 2+)');
    log('slots  conversations   reused: longest     similar      cached       ms/turn: longest  similar   cached   similar/longest  cached/longest');
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
    log('\nthe prompt cache in the `cached` arm: states saved before a sequence was overwritten, and restored for a conversation that came back');
    for (const line of cacheLines) log(line);
  } finally {
    await engine.dispose();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
