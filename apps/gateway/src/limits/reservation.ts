/** Output cap when a request names none and the model's context size is unknown. */
export const DEFAULT_OUTPUT_CAP = 4_096;

const RETRIEVAL = /^\/(v1\/)?(embeddings|rerank|reranking)$/;
const NO_OUTPUT = /^\/(v1\/)?messages\/count_tokens$/;

/** A request's bound in tokens, in its two parts, which a money budget prices apart. */
export interface ReservationBound {
  /** Its prompt tokens at most. */
  prompt: number;
  /** Its output tokens at most (0 for embeddings, rerank and token counts). */
  output: number;
}

/**
 * A bound on the tokens a request can spend, reserved from its budget before dispatch: the body's
 * UTF-8 bytes bound its prompt (every token of the fixtures' and llama.cpp's byte-fallback
 * vocabularies covers at least one byte; the chat template's own tokens are covered by the JSON
 * around the text), plus its output cap (`max_tokens`, `max_completion_tokens` or
 * `max_output_tokens`, times `n`; else the model's context size). Embeddings, rerank and token counts
 * produce no output.
 */
export function reservationFor(path: string, body: unknown, rawBytes: number, contextSize: number | undefined): number {
  const { prompt, output } = reservationBound(path, body, rawBytes, contextSize);
  return prompt + output;
}

/** The same bound as reservationFor, its prompt and output apart. */
export function reservationBound(
  path: string,
  body: unknown,
  rawBytes: number,
  contextSize: number | undefined,
): ReservationBound {
  const fields = (body ?? {}) as Record<string, unknown>;
  const prompt = Math.max(1, rawBytes);
  if (RETRIEVAL.test(path) || NO_OUTPUT.test(path)) return { prompt, output: 0 };
  const cap = [fields.max_tokens, fields.max_completion_tokens, fields.max_output_tokens].find(
    (v): v is number => typeof v === 'number' && Number.isInteger(v) && v > 0,
  );
  const choices = typeof fields.n === 'number' && Number.isInteger(fields.n) && fields.n > 1 ? fields.n : 1;
  const prompts =
    Array.isArray(fields.prompt) && fields.prompt.length > 1 && typeof fields.prompt[0] !== 'number'
      ? fields.prompt.length
      : 1;
  return { prompt, output: (cap ?? contextSize ?? DEFAULT_OUTPUT_CAP) * choices * prompts };
}
