import type { LlamaModel, Token } from 'node-llama-cpp';

/**
 * Sampled tokens as text, one token at a time, the special tokens among `shown` (a format's
 * markers) shown: a multi-byte character split across tokens is read once whole, and the last few
 * tokens read give the tokenizer the context it spaces a token's text by.
 */
export class TokenText {
  /** The last few tokens read, for the tokenizer's leading-space context. */
  readonly recent: Token[];
  /** Tokens of a multi-byte character not yet complete. */
  private readonly pending: Token[] = [];

  constructor(
    private readonly model: Pick<LlamaModel, 'detokenize'>,
    private readonly shown: ReadonlySet<Token>,
    prompt: readonly Token[],
  ) {
    this.recent = prompt.slice(-4);
  }

  /** The text `token` completes (with the tokens before it that were incomplete); null while its character is not whole. */
  next(token: Token): string | null {
    const { pending, recent } = this;
    pending.push(token);
    const shown = pending.some((token) => this.shown.has(token));
    const text = this.model.detokenize(pending, shown, recent);
    // A multi-byte character split across tokens decodes to U+FFFD until its last byte arrives.
    if (text.endsWith('\uFFFD') && pending.length < 4) return null;
    recent.push(...pending);
    if (recent.length > 4) recent.splice(0, recent.length - 4);
    pending.length = 0;
    return text;
  }
}
