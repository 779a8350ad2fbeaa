/** Output cap when a request names none and the model's context size is unknown. */
export const DEFAULT_OUTPUT_CAP = 4_096;

const RETRIEVAL = /^\/(v1\/)?(embeddings|rerank|reranking)$/;
const NO_OUTPUT = /^\/(v1\/)?messages\/count_tokens$/;

/**
 * A bound on the tokens a request can spend, reserved from its budget before dispatch: the body's
 * UTF-8 bytes bound its prompt (every token of the fixtures' and llama.cpp's byte-fallback
 * vocabularies covers at least one byte; the chat template's own tokens are covered by the JSON
 * around the text), plus its output cap (`max_tokens`, `max_completion_tokens` or
 * `max_output_tokens`, times `n`; else the model's context size). Embeddings, rerank and token counts
 * produce no output.
 */
export function reservationFor(path: string, body: unknown, rawBytes: number, contextSize: number | undefined): number {
  const fields = (body ?? {}) as Record<string, unknown>;
  if (RETRIEVAL.test(path) || NO_OUTPUT.test(path)) return Math.max(1, rawBytes);
  const cap = [fields.max_tokens, fields.max_completion_tokens, fields.max_output_tokens].find(
    (v): v is number => typeof v === 'number' && Number.isInteger(v) && v > 0,
  );
  const choices = typeof fields.n === 'number' && Number.isInteger(fields.n) && fields.n > 1 ? fields.n : 1;
  const prompts =
    Array.isArray(fields.prompt) && fields.prompt.length > 1 && typeof fields.prompt[0] !== 'number'
      ? fields.prompt.length
      : 1;
  return Math.max(1, rawBytes) + (cap ?? contextSize ?? DEFAULT_OUTPUT_CAP) * choices * prompts;
}
