/** What a free slot (context sequence) holds, as the choice of a slot for one prompt sees it. */
export interface SlotView {
  /** Tokens the sequence holds: cached work a new prompt that shares none of it throws away. */
  held: number;
  /** How many of them this prompt shares from the start (its prefix already evaluated there). */
  shared: number;
  /** When a request last used it (any clock; 0: never). */
  lastUsed: number;
}

/**
 * A sequence is reused for a prompt only when the prefix they share is more than this share of what
 * the sequence holds (llama.cpp's `--slot-prompt-similarity`, 0.5 there too). Below it the shared part
 * is a template header or a system prompt every request starts with, and taking that sequence would
 * throw away a conversation's whole history to save a few tokens.
 */
export const REUSE_SIMILARITY = 0.5;

/**
 * Which free slot a prompt takes (its index in `free`):
 * 1. the one holding the longest prefix of the prompt, when that prefix is a real part of what it
 *    holds (more than REUSE_SIMILARITY of it: a conversation's follow-up finds its own history);
 * 2. else an empty one (nothing thrown away);
 * 3. else the least valuable: least recently used, then the one holding least.
 * Ties keep the later slot in `free` (the most recently released). Pure: table-tested.
 */
export function chooseSlot(free: readonly SlotView[]): number {
  let reuse = -1;
  for (let i = 0; i < free.length; i++) {
    const slot = free[i] as SlotView;
    if (slot.held === 0 || slot.shared / slot.held <= REUSE_SIMILARITY) continue;
    if (reuse === -1 || slot.shared >= (free[reuse] as SlotView).shared) reuse = i;
  }
  if (reuse !== -1) return reuse;
  let pick = free.length - 1;
  for (let i = free.length - 2; i >= 0; i--) if (lessValuable(free[i] as SlotView, free[pick] as SlotView)) pick = i;
  return pick;
}

/** Whether `a` is worth less to keep than `b`: empty first, then least recently used, then holding least. */
function lessValuable(a: SlotView, b: SlotView): boolean {
  if ((a.held === 0) !== (b.held === 0)) return a.held === 0;
  if (a.lastUsed !== b.lastUsed) return a.lastUsed < b.lastUsed;
  return a.held < b.held;
}

/**
 * The rule before this one, kept as the benchmark's baseline (`npm run bench:prefix`): the slot that
 * shares the longest prefix, whatever it throws away.
 */
export function longestPrefix(free: readonly SlotView[]): number {
  let pick = free.length - 1;
  for (let i = free.length - 2; i >= 0; i--)
    if ((free[i] as SlotView).shared > (free[pick] as SlotView).shared) pick = i;
  return pick;
}
