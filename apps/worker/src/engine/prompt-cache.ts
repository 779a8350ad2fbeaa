import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, statfsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { copyFile, rm } from 'node:fs/promises';
import { basename, join } from 'node:path';
import type { LlamaContextSequence, Token } from 'node-llama-cpp';
import { alive } from './model-download.js';

/** Sequences holding fewer tokens are not worth a file: evaluating them again costs about as much as a restore. */
export const MIN_KEPT_TOKENS = 256;

/** Where kept states live: memory (`/dev/shm` by default), then optionally a disk the memory tier's overflow moves to. */
interface Tier {
  name: 'memory' | 'disk';
  /** This worker's store in the tier's directory. */
  dir: string;
  maxBytes: number;
  /** Bytes its kept states take. */
  bytes: number;
  /** Bytes of the saves and moves into it under way, as guessed before they are written. */
  incoming: number;
}

interface Kept {
  model: string;
  tokens: readonly Token[];
  file: string;
  bytes: number;
  tier: Tier;
  lastUsed: number;
  /** Its request asked for it to be kept longer: dropped after every state that did not. */
  longer: boolean;
  /** Restores reading its file now: it is not dropped or moved under them (another sequence's save may overflow the budget meanwhile). */
  readers: number;
  /** Being copied to the next tier. */
  moving: boolean;
}

/**
 * Where the kept states go and how many bytes they may take (`worker.prompt_cache_mb`,
 * `worker.prompt_cache_dir`), and the disk tier the memory tier's overflow moves to
 * (`worker.prompt_cache_disk_mb`, `worker.prompt_cache_disk_dir`; absent or 0: none).
 */
export interface PromptCacheOptions {
  dir: string;
  maxBytes: number;
  disk?: { dir: string; maxBytes: number };
}

/** What a tier holds and may hold, for the heartbeat. */
export interface PromptCacheUse {
  tier: Tier['name'];
  bytes: number;
  maxBytes: number;
}

/**
 * Conversations' evaluated prompts kept beyond the slots: when a sequence is about to be overwritten
 * by another conversation, its state (KV cache and tokens) is saved to a file in the memory tier (by
 * default `/dev/shm`) with node-llama-cpp's sequence state save; a later request whose prompt starts
 * with a kept one's tokens restores it into its sequence instead of evaluating it again. Each tier is
 * bounded by its size (and its directory's free space), least recently used first out: out of the
 * memory tier into the disk tier when there is one, out of the last tier for good. One store per
 * worker, shared by its models; a model's states go with it (a state only fits the model that wrote it).
 */
export class PromptCache {
  private readonly kept = new Set<Kept>();
  private readonly tiers: Tier[];
  /** The most bytes per token a model's saved states took: a save's size is guessed from it. */
  private readonly perToken = new Map<string, number>();
  private seq = 0;
  /** Saves, restores and moves so far, and what they took, for the log and the benchmark. */
  readonly stats = {
    saved: 0,
    restored: 0,
    restoredFromDisk: 0,
    moved: 0,
    savedBytes: 0,
    saveMs: 0,
    restoreMs: 0,
    dropped: 0,
    failed: 0,
  };

  constructor(options: PromptCacheOptions) {
    this.tiers = [tier('memory', options.dir, options.maxBytes)];
    if (options.disk && options.disk.maxBytes > 0)
      this.tiers.push(tier('disk', options.disk.dir, options.disk.maxBytes));
  }

  /** What each tier holds and may hold (its directory's free space may allow less). */
  use(): PromptCacheUse[] {
    return this.tiers.map((t) => ({ tier: t.name, bytes: t.bytes, maxBytes: t.maxBytes }));
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
    const first = this.tiers[0] as Tier;
    // A directory nearly full (a container's 64 MiB /dev/shm) would drop the state as soon as it was written.
    if (tokens.length < MIN_KEPT_TOKENS || freeBytes(first.dir) < 2 * RESERVE_BYTES) return;
    for (const kept of this.kept) {
      if (kept.model !== model) continue;
      const shared = commonPrefix(kept.tokens, tokens);
      if (shared === tokens.length) return;
      if (shared === kept.tokens.length && kept.readers === 0) this.drop(kept);
    }
    // Room is made before the file is written (its size guessed from the model's earlier states), so
    // the directory never holds more than the budget, not even for a moment.
    const estimate = Math.ceil(tokens.length * (this.perToken.get(model) ?? 0));
    first.incoming += estimate;
    try {
      if (!(await this.makeRoom(first, longer))) return;
      const file = join(first.dir, `${this.seq++}.state`);
      const started = performance.now();
      try {
        const { fileSize } = await sequence.saveStateToFile(file);
        this.stats.saved++;
        this.stats.savedBytes += fileSize;
        this.stats.saveMs += performance.now() - started;
        this.perToken.set(model, Math.max(this.perToken.get(model) ?? 0, fileSize / tokens.length));
        this.kept.add({
          model,
          tokens,
          file,
          bytes: fileSize,
          tier: first,
          lastUsed: performance.now(),
          longer,
          readers: 0,
          moving: false,
        });
        first.bytes += fileSize;
      } catch {
        await rm(file, { force: true });
      }
    } finally {
      first.incoming -= estimate;
    }
    await this.makeRoom(first, true);
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
    if (kept.tier.name === 'disk') this.stats.restoredFromDisk++;
    this.stats.restoreMs += performance.now() - started;
    // A save that found it being read could not make room with it.
    await this.makeRoom(kept.tier, true);
    return true;
  }

  /** A model unloaded: its states fit no other. */
  forget(model: string): void {
    for (const kept of this.kept) if (kept.model === model) this.drop(kept);
    this.perToken.delete(model);
  }

  dispose(): void {
    this.kept.clear();
    for (const t of this.tiers) {
      t.bytes = 0;
      rmSync(t.dir, { recursive: true, force: true });
    }
  }

  /**
   * Makes room in `tier` for what it holds and what is coming into it: the least recently used states
   * go to the next tier (or, from the last, for good) until they fit its size and its directory's free
   * space; those kept longer (see Kept.longer) only once no other is left, and only for a state that is
   * to be kept longer too (`longer`). Whether they fit now.
   */
  private async makeRoom(tier: Tier, longer: boolean): Promise<boolean> {
    const fits = (): boolean =>
      tier.bytes + tier.incoming <= Math.min(tier.maxBytes, tier.bytes + freeBytes(tier.dir) - RESERVE_BYTES);
    const next = this.tiers[this.tiers.indexOf(tier) + 1];
    const order = [...this.kept]
      .filter((kept) => kept.tier === tier)
      .sort((a, b) => Number(a.longer) - Number(b.longer) || a.lastUsed - b.lastUsed);
    for (const kept of order) {
      if (fits() || (kept.longer && !longer)) break;
      if (kept.readers > 0 || kept.moving || !this.kept.has(kept)) continue;
      if (next) await this.move(kept, next);
      else this.drop(kept);
    }
    return fits();
  }

  /** Copies a state to the next tier (making room there first) and removes it here; dropped when that fails. */
  private async move(kept: Kept, to: Tier): Promise<void> {
    const from = kept.tier;
    kept.moving = true;
    to.incoming += kept.bytes;
    try {
      if (!(await this.makeRoom(to, kept.longer))) return this.drop(kept);
      const file = join(to.dir, basename(kept.file));
      await copyFile(kept.file, file);
      // Dropped while it was copied (its model unloaded): the copy goes too.
      if (!this.kept.has(kept)) return void rmSync(file, { force: true });
      rmSync(kept.file, { force: true });
      from.bytes -= kept.bytes;
      to.bytes += kept.bytes;
      kept.tier = to;
      kept.file = file;
      this.stats.moved++;
    } catch {
      this.drop(kept);
    } finally {
      to.incoming -= kept.bytes;
      kept.moving = false;
    }
  }

  private drop(kept: Kept): void {
    if (!this.kept.delete(kept)) return;
    kept.tier.bytes -= kept.bytes;
    this.stats.dropped++;
    rmSync(kept.file, { force: true });
  }
}

/** A tier's store: this worker's own directory in `dir`, after the stores of dead workers there are removed. */
function tier(name: Tier['name'], dir: string, maxBytes: number): Tier {
  mkdirSync(dir, { recursive: true });
  removeOrphans(dir);
  return { name, dir: mkdtempSync(join(dir, `${PREFIX}${process.pid}-`)), maxBytes, bytes: 0, incoming: 0 };
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
