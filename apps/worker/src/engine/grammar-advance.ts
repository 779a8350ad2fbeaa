import type { LlamaGrammarEvaluationState, LlamaModel, Token } from 'node-llama-cpp';

/** The part of node-llama-cpp's native addon that advances a grammar state by one token. */
interface GrammarAddon {
  _llama: { _bindings: { AddonSampler: { acceptGrammarEvaluationStateToken(state: unknown, token: Token): void } } };
}

/**
 * Advances a grammar's evaluation state over a token that was not sampled here (a resumed stream's
 * delivered tokens), exactly as sampling that token would have. node-llama-cpp has no public call
 * for it; its own speculative decoding uses this one (`LlamaSampler._acceptTokenOnGrammarEvaluationState`
 * in 3.21), which is why the dependency is pinned: an upgrade must keep `llama-resume.spec.ts` green.
 */
export function acceptIntoGrammar(model: LlamaModel, state: LlamaGrammarEvaluationState, token: Token): void {
  const addon = (model as unknown as GrammarAddon)._llama._bindings.AddonSampler;
  addon.acceptGrammarEvaluationStateToken((state as unknown as { _state: unknown })._state, token);
}
