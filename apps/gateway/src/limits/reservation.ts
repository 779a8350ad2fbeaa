import { MAX_CHAT_CHOICES, MAX_COMPLETION_PROMPTS } from '@cortex/wire';

/** Output cap when a request names none and the model's context size is unknown. */
export const DEFAULT_OUTPUT_CAP = 4_096;

const RETRIEVAL = /^\/(v1\/)?(embeddings|rerank|reranking)$/;
const RERANK = /^\/(v1\/)?(rerank|reranking)$/;
const NO_OUTPUT = /^\/(v1\/)?messages\/count_tokens$/;
const COMPLETIONS = /^\/(v1\/)?completions$/;

/** A request's bound in tokens, in its two parts, which a money budget prices apart. */
export interface ReservationBound {
  /** Its prompt tokens at most, summed over every run it fans out into. */
  prompt: number;
  /** Its output tokens at most (0 for embeddings, rerank and token counts), summed over its runs. */
  output: number;
}

/**
 * A bound on the tokens a request can spend, reserved from its budget before dispatch (see
 * reservationBound): its prompt and output bounds together.
 */
export function reservationFor(path: string, body: unknown, rawBytes: number, contextSize: number | undefined): number {
  const { prompt, output } = reservationBound(path, body, rawBytes, contextSize);
  return prompt + output;
}

/**
 * The most a request can spend, in prompt and output tokens, over every run it fans out into; each
 * run is charged its whole prompt. A run's prompt is bounded by the UTF-8 bytes of its body (every
 * token of the fixtures' and llama.cpp's byte-fallback vocabularies covers at least one byte; the
 * chat template's own tokens are covered by the JSON around the text):
 * - a chat completion's `n` choices each evaluate the whole body's prompt;
 * - a legacy completion's prompt list runs each prompt `n` times, each with the body less the other
 *   prompts (their shortest JSON, so what is left over-counts the rest of the body, never less);
 * - a rerank scores each document with the query: each document with the body less the others;
 * - embeddings evaluate each input once: the body bounds them all.
 * Each run's output is capped by `max_tokens`, `max_completion_tokens` or `max_output_tokens`, else
 * the model's context size. Embeddings, rerank and token counts produce no output. Counts past what
 * the decoders accept (`n` above 16) count as one: the request is refused before it runs.
 */
export function reservationBound(
  path: string,
  body: unknown,
  rawBytes: number,
  contextSize: number | undefined,
): ReservationBound {
  const fields = (body !== null && typeof body === 'object' ? body : {}) as Record<string, unknown>;
  const whole = Math.max(1, rawBytes);
  if (RERANK.test(path)) return { prompt: listPrompts(fields.documents, whole, 1), output: 0 };
  if (RETRIEVAL.test(path) || NO_OUTPUT.test(path)) return { prompt: whole, output: 0 };
  const cap = [fields.max_tokens, fields.max_completion_tokens, fields.max_output_tokens].find(
    (v): v is number => typeof v === 'number' && Number.isInteger(v) && v > 0,
  );
  const perRun = cap ?? contextSize ?? DEFAULT_OUTPUT_CAP;
  const n = typeof fields.n === 'number' && Number.isInteger(fields.n) && fields.n > 1 ? fields.n : 1;
  if (COMPLETIONS.test(path)) {
    const prompts = promptList(fields.prompt);
    const choices = prompts * n <= MAX_COMPLETION_PROMPTS ? n : 1;
    const runs = prompts <= MAX_COMPLETION_PROMPTS ? prompts * choices : 1;
    const prompt = prompts > 1 && runs > 1 ? listPrompts(fields.prompt, whole, choices) : whole * choices;
    return { prompt, output: perRun * runs };
  }
  const choices = n <= MAX_CHAT_CHOICES ? n : 1;
  return { prompt: whole * choices, output: perRun * choices };
}

/** How many prompts a legacy completion's `prompt` holds: a list of strings or of token-id lists; one else (a string, or token ids). */
function promptList(prompt: unknown): number {
  return Array.isArray(prompt) && prompt.length > 1 && prompt.some((item) => typeof item !== 'number')
    ? prompt.length
    : 1;
}

/**
 * The prompt tokens of a list whose every item runs `times` times, each with the rest of the body
 * (`whole` bytes in all): each item's run is bounded by the body less the other items. An item's
 * shortest JSON (`JSON.stringify`) is at most its bytes in the body, so the rest is never under-counted.
 */
function listPrompts(items: unknown, whole: number, times: number): number {
  if (!Array.isArray(items) || items.length < 2) return whole * times;
  const sizes = items.map((item) => Buffer.byteLength(JSON.stringify(item) ?? ''));
  const all = sizes.reduce((sum, size) => sum + size, 0);
  const rest = Math.max(0, whole - all);
  return sizes.reduce((sum, size) => sum + Math.max(1, size + rest) * times, 0);
}
