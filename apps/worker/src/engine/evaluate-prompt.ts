import type { LlamaContextSequence, Token } from 'node-llama-cpp';

/**
 * Evaluates prompt tokens into a sequence one batch at a time and stops at the first batch boundary
 * after `signal` aborts. node-llama-cpp's evaluation takes no abort signal, and a single call for
 * a long prompt (tens of thousands of tokens on a CPU) runs to its end: a client that disconnected
 * would keep the slot busy for as long. Returns how many tokens were evaluated.
 */
export async function evaluatePromptInBatches(
  sequence: LlamaContextSequence,
  tokens: readonly Token[],
  batchSize: number,
  signal: AbortSignal,
): Promise<number> {
  let done = 0;
  while (done < tokens.length && !signal.aborted) {
    const chunk = tokens.slice(done, done + batchSize);
    await sequence.evaluateWithoutGeneratingNewTokens(chunk);
    done += chunk.length;
  }
  return done;
}
