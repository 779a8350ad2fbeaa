import {
  DraftSequenceTokenPredictor,
  InputLookupTokenPredictor,
  type LlamaContext,
  type LlamaContextSequence,
  type LlamaModel,
  type Token,
  type TokenPredictor,
} from 'node-llama-cpp';

/**
 * Speculative decoding for one loaded model: each of its sequences gets a token predictor whose
 * guesses the model checks in one batch. `draft`: a smaller model with the same vocabulary, one
 * draft sequence per slot; `lookup`: guesses from the prompt itself (input lookup), no model.
 */
export interface Speculation {
  readonly kind: 'draft' | 'lookup';
  /** A predictor for one sequence (never shared between sequences). */
  predictor(): TokenPredictor;
  dispose(): Promise<void>;
}

export const inputLookup: Speculation = {
  kind: 'lookup',
  predictor: () => new InputLookupTokenPredictor(),
  dispose: () => Promise.resolve(),
};

/**
 * A draft model's context with a sequence per slot of its target. Each step waits for at least one
 * drafted token: with the default (none) the target never waited for its draft on a CPU, where both
 * share the same cores, and nothing was ever drafted.
 */
export function draftSpeculation(model: LlamaModel, context: LlamaContext): Speculation {
  return {
    kind: 'draft',
    predictor: () => new DraftSequenceTokenPredictor(context.getSequence(), { minTokens: 1 }),
    dispose: async () => {
      await context.dispose();
      await model.dispose();
    },
  };
}

/** Input lookup guesses from the tokens it is given: the request's prompt. */
export function lookUpIn(sequence: LlamaContextSequence, prompt: Token[]): void {
  if (sequence.tokenPredictor instanceof InputLookupTokenPredictor) sequence.tokenPredictor.updateInputTokens(prompt);
}

export interface PredictionCounts {
  /** Predicted tokens the model checked. */
  drafted: number;
  /** Of those, the ones it agreed with. */
  accepted: number;
}

/** A request's drafted and accepted tokens: the sequence's totals now, less those before it began. */
export function draftUsageSince(
  before: PredictionCounts | null,
  sequence: LlamaContextSequence,
): { draftTokens: number; acceptedDraftTokens: number } | undefined {
  const after = predictionCounts(sequence);
  if (!after || !before) return undefined;
  return { draftTokens: after.drafted - before.drafted, acceptedDraftTokens: after.accepted - before.accepted };
}

/** The sequence's running totals of checked and accepted predictions; null without a predictor. */
export function predictionCounts(sequence: LlamaContextSequence): PredictionCounts | null {
  if (!sequence.tokenPredictor) return null;
  const { validated, refuted } = sequence.tokenPredictions;
  return { drafted: validated + refuted, accepted: validated };
}
