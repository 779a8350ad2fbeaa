import type { TokenLogprob } from '@cortex/contracts';

/** Text the decode read through its output parser, and the log-probabilities of the tokens that wrote it. */
interface Piece {
  /** The sampled tokens' entries: several for a character split across tokens, none for a written token. */
  readonly entries: readonly TokenLogprob[];
  /** Of its text, what is not accounted for yet: the answer may still take it. */
  rest: string;
  /** Of its text, what the answer text being matched took. */
  taken: string;
}

const utf8 = (text: string): number[] => [...Buffer.from(text, 'utf8')];

/**
 * Which tokens' log-probabilities go out as the answer's, and with what text: only the answer's
 * tokens get entries, and the entries of an answer text event join to exactly its text. The parser
 * takes markers (`</think>`, `[TOOL_CALLS]`, `<tool_call>`, Harmony's channels), reasoning and calls
 * out of what the model wrote, and holds text that may still be the start of a marker or a stop
 * string; its answer is always what the model wrote less some of it. So each answer character is
 * matched to the first token, in the order they were read, whose text still holds it, and what the
 * match passes over is not answer.
 *
 * - A token wholly in a marker, the reasoning or a call gets no entry.
 * - A token split between a marker (or reasoning, or a call) and the answer gets one entry, whose
 *   text is its answer part; its log-probability is the whole token's.
 * - A token whose answer part goes out in two events (white space the parser held after it until
 *   more answer came) gets an entry in each, each with its part of the text.
 * - A character split across tokens is the text of its first token's entry; the others have empty text.
 *
 * After each token, the decode says how much of what was read may still become answer (`hold`: the
 * parser's held text, and the answer the stop strings hold back); everything read before that is
 * settled and dropped, so an answer character is never matched to reasoning or a call read earlier.
 */
export class AnswerLogprobs {
  private unread: TokenLogprob[] = [];
  private readonly pieces: Piece[] = [];
  private holding = 0;

  /** A sampled token's log-probability: it goes with the next text read. */
  sampled(entry: TokenLogprob): void {
    this.unread.push(entry);
  }

  /** The parser reads `text`, written by the tokens sampled since the last read (none: written, not sampled). */
  read(text: string): void {
    this.pieces.push({ entries: this.unread, rest: text, taken: '' });
    this.unread = [];
  }

  /** Of what was read, the last `chars` characters may still become answer. */
  hold(chars: number): void {
    this.holding = chars;
  }

  /** The entries of an answer text event, joining to exactly its text (none where no token wrote a character of it). */
  entries(text: string): TokenLogprob[] {
    const out: TokenLogprob[] = [];
    let at = 0;
    for (const char of text) {
      const found = this.find(char, at);
      if (!found) continue;
      // Pieces passed over are done: what they gave this event goes out, the rest of them is not answer.
      for (; at < found.piece; at++) this.close(this.pieces[at] as Piece, out, true);
      const piece = this.pieces[at] as Piece;
      piece.taken += char;
      piece.rest = piece.rest.slice(found.index + char.length);
    }
    for (; at > 0; at--) this.pieces.shift();
    // The piece this event ended in may give more to a later one.
    const last = this.pieces[0];
    if (last) this.close(last, out, last.rest === '');
    if (last?.rest === '') this.pieces.shift();
    return out;
  }

  /** The token is handled: what was read before the held tail is settled; `all` at the end of the output. */
  settle(all = false): void {
    if (all) {
      this.pieces.length = 0;
      return;
    }
    let excess = this.pieces.reduce((sum, piece) => sum + piece.rest.length, 0) - this.holding;
    while (excess > 0 && this.pieces.length > 0) {
      const piece = this.pieces[0] as Piece;
      const cut = Math.min(excess, piece.rest.length);
      piece.rest = piece.rest.slice(cut);
      excess -= cut;
      if (piece.rest === '') this.pieces.shift();
    }
  }

  private find(char: string, from: number): { piece: number; index: number } | null {
    for (let piece = from; piece < this.pieces.length; piece++) {
      const index = (this.pieces[piece] as Piece).rest.indexOf(char);
      if (index !== -1) return { piece, index };
    }
    return null;
  }

  /** The entries for what `piece` gave the current event; `done`: it gives no more. */
  private close(piece: Piece, out: TokenLogprob[], done: boolean): void {
    const { taken, entries } = piece;
    piece.taken = '';
    if (done) piece.rest = '';
    if (taken === '' || entries.length === 0) return;
    // A character split across tokens is its first token's text; the others' is empty, so the entries still join to the answer.
    const [first, ...others] = entries as [TokenLogprob, ...TokenLogprob[]];
    out.push(taken === first.token ? first : { ...first, token: taken, bytes: utf8(taken) });
    for (const other of others) out.push({ ...other, token: '', bytes: [] });
  }
}
