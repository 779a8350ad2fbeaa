import type { LlamaModel } from 'node-llama-cpp';

/** The tokens a GGUF header lists (`tokenizer.ggml.tokens`), or undefined when it does not. */
export function headerVocabulary(metadata: unknown): readonly string[] | undefined {
  return (metadata as { tokenizer?: { ggml?: { tokens?: readonly string[] } } }).tokenizer?.ggml?.tokens;
}

/** The model's tokens as its GGUF header lists them (`tokenizer.ggml.tokens`), or undefined when it does not. */
export function vocabulary(model: LlamaModel): readonly string[] | undefined {
  return headerVocabulary(model.fileInfo.metadata);
}

/** How many tokens the model has, or null when its header does not list them. */
export function vocabularySize(model: LlamaModel): number | null {
  return vocabulary(model)?.length ?? null;
}
