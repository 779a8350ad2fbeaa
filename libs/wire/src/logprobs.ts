import type { TokenLogprob } from '@cortex/contracts';

/** A token's log-probability as OpenAI's APIs write it (Chat Completions' `logprobs.content[]`, Responses' `logprobs[]`). */
export function openAiLogprob(entry: TokenLogprob): {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: Array<{ token: string; logprob: number; bytes: number[] }>;
} {
  // Only an echoed prompt's first token has none, and these APIs echo no prompt.
  return {
    token: entry.token,
    logprob: entry.logprob ?? -9999,
    bytes: entry.bytes,
    top_logprobs: entry.top.map((t) => ({ token: t.token, logprob: t.logprob, bytes: t.bytes })),
  };
}
