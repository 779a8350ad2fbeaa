import type { LlamaModel, Token } from 'node-llama-cpp';
import { CortexError, type RawPrompt } from '@cortex/contracts';
import { vocabularySize } from './vocabulary.js';

/** A model's fill-in-the-middle tokens; `middle` is null for models that put the prefix last (SPM order). */
export interface FimTokens {
  prefix: Token;
  suffix: Token;
  middle: Token | null;
}

export function fimTokens(model: LlamaModel): FimTokens | null {
  const { prefix, suffix, middle } = model.tokens.infill;
  return prefix === null || suffix === null ? null : { prefix, suffix, middle };
}

/**
 * A legacy completion's prompt as tokens, without any chat template: the text (special tokens in it
 * are read as such, as llama.cpp's server does) or the token ids as given, after the BOS token where
 * the model wants one. With a suffix, the fill-in-the-middle layout node-llama-cpp's infill uses:
 * prefix marker, prompt, suffix marker, suffix, middle marker.
 */
export function renderRawPrompt(model: LlamaModel, modelId: string, raw: RawPrompt): Token[] {
  const prompt = raw.tokens ? checkedTokens(model, modelId, raw.tokens) : model.tokenize(raw.text ?? '', true);
  const bos = model.tokens.bos;
  const head: Token[] = bos !== null && model.tokens.shouldPrependBosToken ? [bos] : [];
  if (raw.suffix === undefined) {
    // At least one token must be evaluated to produce the next: an empty prompt starts from BOS.
    if (prompt.length === 0 && head.length === 0 && bos !== null) head.push(bos);
    if (prompt.length === 0 && head.length === 0)
      throw new CortexError('invalid_request', `prompt: must not be empty for ${modelId}`, { param: 'prompt' });
    return [...head, ...prompt];
  }
  const fim = fimTokens(model);
  if (!fim) {
    throw new CortexError(
      'invalid_request',
      `suffix: ${modelId} has no fill-in-the-middle tokens; leave suffix out or use a code model with FIM tokens`,
      { param: 'suffix' },
    );
  }
  const suffix = model.tokenize(raw.suffix, false);
  if (fim.middle === null) return [...head, fim.suffix, ...suffix, fim.prefix, ...prompt];
  return [...head, fim.prefix, ...prompt, fim.suffix, ...suffix, fim.middle];
}

/** The prompt's text for `echo`: as sent, or its token ids detokenized. */
export function rawPromptText(model: LlamaModel, raw: RawPrompt): string {
  return raw.text ?? model.detokenize(raw.tokens as Token[], true);
}

function checkedTokens(model: LlamaModel, modelId: string, tokens: readonly number[]): Token[] {
  const size = vocabularySize(model);
  const bad = size === null ? -1 : tokens.findIndex((token) => token >= size);
  if (bad !== -1)
    throw new CortexError(
      'invalid_request',
      `prompt[${bad}]: token ${tokens[bad]} is not in ${modelId}'s vocabulary of ${size} tokens`,
      { param: 'prompt' },
    );
  return tokens as Token[];
}
