import type { ChatFormat } from './chat-format.js';

/** What a model writes by its format and chat template: the format's id, whether it calls tools, whether it reasons. */
export interface FormatCapabilities {
  format: string;
  tools: boolean;
  reasoning: boolean;
}

/**
 * What a model of `format` writes, as the format's description, the chat template's text and the
 * model's vocabulary (`tokenizer.ggml.tokens`, where known) say: the one rule for every engine at load
 * and for a GGUF's header facts before any load. It reasons when its format has Harmony's channels, or
 * a reasoning block whose opening marker the template writes or the vocabulary holds as one token.
 */
export function formatCapabilities(
  format: ChatFormat,
  template: string,
  vocabulary: readonly string[] = [],
): FormatCapabilities {
  const open = format.reasoning?.open;
  return {
    format: format.id,
    tools: format.tools !== undefined || format.harmony !== undefined,
    reasoning:
      format.harmony !== undefined || (open !== undefined && (template.includes(open) || vocabulary.includes(open))),
  };
}
