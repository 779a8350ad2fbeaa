import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, statfsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { LlamaContextSequence, Token } from 'node-llama-cpp';
import { alive } from './model-download.js';

/** Sequences holding fewer tokens are not worth a file: evaluating them again costs about as much as a restore. */
export const MIN_KEPT_TOKENS = 256;

interface Kept {
  model: string;
  tokens: readonly Token[];
  file: string;
  bytes: number;
  lastUsed: number;
  /** Its request asked for it to be kept longer: dropped after every state that did not. */
  longer: boolean;
  /** Restores reading its file now: it is not dropped under them (another sequence's save may overflow the budget meanwhile). */
  readers: number;
}

/** Where the kept states go and how many bytes they may take (`worker.prompt_cache_mb`, `worker.prompt_cache_dir`). */
export interface PromptCacheOptions {
  dir: string;
  maxBytes: number;
}

/**
 * Conversations' evaluated prompts kept beyond the slots: when a sequence is about to be overwritten
 * by another conversation, its state (KV cache and tokens) is saved to a file in `dir` (by default
 * `/dev/shm`, memory) with node-llama-cpp's sequence state save; a later request whose prompt starts
 * with a kept one's tokens restores it into its sequence instead of evaluating it again. Bounded by
 * `maxBytes` (and the directory's free space), least recently used first out. One store per worker,
 * shared by its models; a model's states go with it (a state only fits the model that wrote it).
 */
export class PromptCache {
  private readonly kept = new Set<Kept>();
  private bytes = 0;
  /** Bytes of the saves under way, as guessed before they are written. */
  private incoming = 0;
  /** The most bytes per token a model's saved states took: a save's size is guessed from it. */
  private readonly perToken = new Map<string, number>();
  private readonly dir: string;
  private seq = 0;
  /** Saves and restores so far, and what they took, for the log and the benchmark. */
  readonly stats = { saved: 0, restored: 0, savedBytes: 0, saveMs: 0, restoreMs: 0, dropped: 0, failed: 0 };

  constructor(private readonly options: PromptCacheOptions) {
    mkdirSync(options.dir, { recursive: true });
    removeOrphans(options.dir);
    this.dir = mkdtempSync(join(options.dir, `${PREFIX}${process.pid}-`));
  }

  /** Bytes the kept states take now. */
  get size(): number {
    return this.bytes;
  }

  /** Bytes they may take (`worker.prompt_cache_mb`; the directory's free space may allow less). */
  get maxBytes(): number {
    return this.options.maxBytes;
  }

  /**
   * The kept state of `model` that shares the longest prefix with `context`, when that is more than
   * `atLeast` tokens (what the chosen sequence already holds of it) and it is a real part of the kept
   * state (more than half): restoring it then saves evaluating those tokens.
   */
  best(model: string, context: readonly Token[], atLeast: number): { kept: Kept; shared: number } | null {
    let best: { kept: Kept; shared: number } | null = null;
    for (const kept of this.kept) {
      if (kept.model !== model) continue;
      const shared = commonPrefix(kept.tokens, context);
      if (shared > atLeast && shared * 2 > kept.tokens.length && shared > (best?.shared ?? 0)) best = { kept, shared };
    }
    return best;
  }

  /**
   * Saves what `sequence` holds before it is overwritten, unless it holds too little or a kept state
   * of the same model already starts with all of it; kept states it extends are dropped. A save that
   * fails (the directory full) is given up: the prompt is evaluated again when it comes back.
   */
  async keep(model: string, sequence: LlamaContextSequence, longer = false): Promise<void> {
    // node-llama-cpp's getter hands out a copy already.
    const tokens = sequence.contextTokens;
    // A directory nearly full (a container's 64 MiB /dev/shm) would drop the state as soon as it was written.
    if (tokens.length < MIN_KEPT_TOKENS || freeBytes(this.dir) < 2 * RESERVE_BYTES) return;
    for (const kept of this.kept) {
      if (kept.model !== model) continue;
      const shared = commonPrefix(kept.tokens, tokens);
      if (shared === tokens.length) return;
      if (shared === kept.tokens.length && kept.readers === 0) this.drop(kept);
    }
    // Room is made before the file is written (its size guessed from the model's earlier states), so
    // the directory never holds more than the budget, not even for a moment.
    const estimate = Math.ceil(tokens.length * (this.perToken.get(model) ?? 0));
    this.incoming += estimate;
    if (!this.bound(longer)) {
      this.incoming -= estimate;
      return;
    }
    const file = join(this.dir, `${this.seq++}.state`);
    const started = performance.now();
    try {
      const { fileSize } = await sequence.saveStateToFile(file);
      this.stats.saved++;
      this.stats.savedBytes += fileSize;
      this.stats.saveMs += performance.now() - started;
      this.perToken.set(model, Math.max(this.perToken.get(model) ?? 0, fileSize / tokens.length));
      this.kept.add({ model, tokens, file, bytes: fileSize, lastUsed: performance.now(), longer, readers: 0 });
      this.bytes += fileSize;
    } catch {
      await rm(file, { force: true });
    } finally {
      this.incoming -= estimate;
    }
    this.bound();
  }

  /**
   * Loads a kept state into `sequence` (whose own state is gone after it). A load that fails drops
   * the state and says so (false): the sequence is empty then, and the prompt is evaluated again.
   */
  async restore(kept: Kept, sequence: LlamaContextSequence): Promise<boolean> {
    const started = performance.now();
    kept.lastUsed = started;
    kept.readers++;
    try {
      // Emptied first: a load that fails forgets the sequence's tokens but may leave their cache
      // behind, and the next evaluation would fail on it.
      await sequence.eraseContextTokenRanges([{ start: 0, end: sequence.nextTokenIndex }]);
      await sequence.loadStateFromFile(kept.file, { acceptRisk: true });
    } catch {
      this.stats.failed++;
      kept.readers--;
      this.drop(kept);
      return false;
    }
    kept.readers--;
    kept.lastUsed = performance.now();
    this.stats.restored++;
    this.stats.restoreMs += performance.now() - started;
    this.bound();
    return true;
  }

  /** A model unloaded: its states fit no other. */
  forget(model: string): void {
    for (const kept of this.kept) if (kept.model === model) this.drop(kept);
    this.perToken.delete(model);
  }

  dispose(): void {
    this.kept.clear();
    this.bytes = 0;
    rmSync(this.dir, { recursive: true, force: true });
  }

  /**
   * Drops the least recently used states until they and the saves under way fit the budget and the
   * directory's free space; those kept longer (see Kept.longer) only once no other is left, and only
   * for a save that is to be kept longer too (`longer`). Whether they fit now.
   */
  private bound(longer = true): boolean {
    const free = freeBytes(this.dir);
    const limit = Math.min(this.options.maxBytes, this.bytes + free - RESERVE_BYTES);
    const order = [...this.kept].sort((a, b) => Number(a.longer) - Number(b.longer) || a.lastUsed - b.lastUsed);
    for (const kept of order) {
      if (this.bytes + this.incoming <= limit || (kept.longer && !longer)) break;
      if (kept.readers === 0) this.drop(kept);
    }
    return this.bytes + this.incoming <= limit;
  }

  private drop(kept: Kept): void {
    if (!this.kept.delete(kept)) return;
    this.bytes -= kept.bytes;
    this.stats.dropped++;
    rmSync(kept.file, { force: true });
  }
}

const PREFIX = 'cortex-prompt-cache-';

/**
 * The stores of worker processes that are gone (killed before they could remove theirs): memory in
 * /dev/shm nobody frees otherwise. Only this user's: a directory shared with other users (the host's
 * /dev/shm) may hold another user's store, which is theirs to remove, and one that cannot be removed
 * must not stop the worker.
 */
function removeOrphans(dir: string): void {
  const uid = process.getuid?.();
  for (const name of readdirSync(dir)) {
    const pid = Number(/^cortex-prompt-cache-(\d+)-/.exec(name)?.[1]);
    if (!pid || pid === process.pid || alive(pid)) continue;
    const path = join(dir, name);
    try {
      if (uid !== undefined && statSync(path).uid !== uid) continue;
      rmSync(path, { recursive: true, force: true });
    } catch {
      // Gone meanwhile, or not ours to remove: either way not this worker's to free.
    }
  }
}

/** Left free in the cache's directory for everything else that uses it. */
const RESERVE_BYTES = 64 * 2 ** 20;

/** `/dev/shm` (memory) where the system has one, else the temp directory. */
export function defaultPromptCacheDir(): string {
  return existsSync('/dev/shm') ? '/dev/shm' : tmpdir();
}

function freeBytes(dir: string): number {
  try {
    const stats = statfsSync(dir);
    return stats.bavail * stats.bsize;
  } catch {
    return Number.POSITIVE_INFINITY;
  }
}

function commonPrefix(a: readonly Token[], b: readonly Token[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}
