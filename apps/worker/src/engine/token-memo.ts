import type { Token, Tokenizer } from 'node-llama-cpp';

/** Runs of message text shorter than this are tokenized every time: they cost microseconds, and there are many. */
const MIN_CHARS = 256;

/**
 * A model's tokenizer that remembers the runs of text it tokenized, for rendering prompts.
 *
 * node-llama-cpp tokenizes a rendered prompt one run of text at a time, the text between two special
 * tokens (`LlamaText.tokenize`), so each message of a conversation is a run of its own. The next turn
 * of a conversation repeats every earlier message: only its new runs need the tokenizer. An agent's
 * 80 KB prompt took 20–58 ms to tokenize whole on a 2-core VM and under 2 ms from the memo
 * (docs/benchmarks.md). That time was spent on the worker's event loop, where every stream of the
 * worker waited for it.
 *
 * The chat template's own runs (`[INST] `, `<|im_start|>assistant\n`: text tokenized with special
 * tokens, which a message's text never is) are kept whatever their length. Every request of the model
 * repeats them, and each costs two or three native calls (node-llama-cpp tokenizes a template run
 * with a leading token and detokenizes the result to trim its space).
 *
 * The answer is the tokenizer's own, computed once per run of text and options, so a prompt tokenizes
 * to exactly the tokens it did without the memo. At most `maxChars` characters of text are kept; the
 * runs used longest ago go first.
 */
export function memoTokenizer(tokenizer: Tokenizer, maxChars: number): Tokenizer {
  const runs = new Map<string, readonly Token[]>();
  let chars = 0;
  const tokenize = (text: string, specialTokens?: boolean | 'builtin', options?: 'trimLeadingSpace'): Token[] => {
    if (specialTokens === 'builtin') return tokenizer(text as never, 'builtin');
    if ((text.length < MIN_CHARS && specialTokens !== true) || text.length > maxChars)
      return tokenizer(text, specialTokens, options);
    const key = `${specialTokens ? 's' : 't'}${options === 'trimLeadingSpace' ? 'l' : '-'}${text}`;
    const known = runs.get(key);
    if (known) {
      // Most recently used last: the first entries are the first to go.
      runs.delete(key);
      runs.set(key, known);
      return known.slice();
    }
    const tokens = tokenizer(text, specialTokens, options);
    runs.set(key, tokens.slice());
    chars += key.length;
    for (const [old] of runs) {
      if (chars <= maxChars) break;
      runs.delete(old);
      chars -= old.length;
    }
    return tokens;
  };
  return Object.assign(tokenize, {
    detokenize: tokenizer.detokenize,
    isSpecialToken: tokenizer.isSpecialToken,
    isEogToken: tokenizer.isEogToken,
  }) as Tokenizer;
}
