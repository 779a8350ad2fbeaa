import { TokenBias, type Token } from 'node-llama-cpp';
import { CortexError, type CanonicalRequest } from '@cortex/contracts';
import type { DecodeModel } from './decode.js';

/**
 * A request's `logit_bias` as node-llama-cpp's token biases, added to the logits: `free` alone,
 * `held` with the model's marker tokens banned as well, for while a grammar holds the output, and
 * `call` with those a call's grammar does not write banned, for while it holds a call (the model
 * checked the ids against its vocabulary).
 */
export function requestBias(
  model: Pick<DecodeModel, 'model' | 'markerTokens' | 'callMarkerTokens'>,
  logitBias: Record<string, number> | undefined,
): { free: TokenBias; held: TokenBias; call: TokenBias } | undefined {
  if (!logitBias) return undefined;
  const [free, held, call] = [0, 1, 2].map(() => new TokenBias(model.model.tokenizer)) as [
    TokenBias,
    TokenBias,
    TokenBias,
  ];
  for (const [id, logit] of Object.entries(logitBias)) {
    for (const bias of [free, held, call]) bias.set(Number(id) as Token, { logit });
  }
  if (model.markerTokens.length > 0) held.set([...model.markerTokens], 'never');
  if (model.callMarkerTokens.length > 0) call.set([...model.callMarkerTokens], 'never');
  return { free, held, call };
}

/**
 * A logit_bias token id past the vocabulary (`size` tokens; null: not known) is a 400 naming the
 * field: llama.cpp would read past its logits.
 */
export function checkLogitBias(request: CanonicalRequest, size: number | null, model: string): void {
  const outside =
    size === null ? undefined : Object.keys(request.sampling.logitBias ?? {}).find((id) => Number(id) >= size);
  if (outside !== undefined) {
    throw new CortexError(
      'invalid_request',
      `logit_bias: token ${outside} is not in ${model}'s vocabulary (token ids 0 to ${(size ?? 0) - 1})`,
      { param: 'logit_bias' },
    );
  }
}
