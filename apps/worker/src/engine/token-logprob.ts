import type { LlamaModel, Token } from 'node-llama-cpp';
import type { TokenLogprob } from '@cortex/contracts';

/** What a log-probability of 0 probability is written as (OpenAI's floor); JSON has no -Infinity. */
const NO_PROBABILITY = -9999;

/** A token's text (after `before`, the tokens ahead of it, for a tokenizer's spacing) and its UTF-8 bytes. */
export function tokenPiece(
  model: Pick<LlamaModel, 'detokenize'>,
  token: Token,
  before: readonly Token[],
): { token: string; bytes: number[] } {
  const text = model.detokenize([token], true, before.length > 0 ? [...before] : undefined);
  return { token: text, bytes: [...Buffer.from(text, 'utf8')] };
}

/** One token's log-probability and the `top` likeliest tokens of its step (the map is sorted, likeliest first). */
export function tokenLogprob(
  model: Pick<LlamaModel, 'detokenize'>,
  token: Token,
  probabilities: ReadonlyMap<Token, number>,
  top: number,
  before: readonly Token[] = [],
): TokenLogprob {
  const logprob = (p: number | undefined): number => (p !== undefined && p > 0 ? Math.log(p) : NO_PROBABILITY);
  const alternatives: TokenLogprob['top'] = [];
  for (const [id, p] of probabilities) {
    if (alternatives.length >= top) break;
    alternatives.push({ ...tokenPiece(model, id, before), logprob: logprob(p) });
  }
  return { ...tokenPiece(model, token, before), logprob: logprob(probabilities.get(token)), top: alternatives };
}
