import type { LlamaModel } from 'node-llama-cpp';

/** The model's tokens as its GGUF header lists them (`tokenizer.ggml.tokens`), or undefined when it does not. */
export function vocabulary(model: LlamaModel): readonly string[] | undefined {
  const metadata = model.fileInfo.metadata as { tokenizer?: { ggml?: { tokens?: readonly string[] } } };
  return metadata.tokenizer?.ggml?.tokens;
}

/** How many tokens the model has, or null when its header does not list them. */
export function vocabularySize(model: LlamaModel): number | null {
  return vocabulary(model)?.length ?? null;
}
