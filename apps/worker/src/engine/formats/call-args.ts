import type { CallSink } from './call-body.js';
import type { ArgSyntax } from './chat-format.js';
import { JsonDepth, trailingSpace } from './scan.js';
import { TaggedArgs } from './tagged-args.js';

/** A call's arguments as they stream: deltas of one JSON object. */
export interface ArgsParser {
  push(text: string): number;
  end(): void;
  /** The arguments ended by themselves (their JSON closed, the call having no closing marker). */
  readonly done: boolean;
}

export function argsParser(
  syntax: ArgSyntax,
  sink: CallSink,
  closes: boolean,
  argsClose: string | undefined,
): ArgsParser {
  switch (syntax.kind) {
    case 'tagged':
      return new TaggedArgs(syntax, sink, argsClose);
    case 'dict':
      return new WholeArgs(sink, (text) => dictJson(text, syntax.quote));
    case 'json':
      return syntax.fence ? new WholeArgs(sink, unfence) : new JsonArgs(sink, closes);
  }
}

/** The text that begins an argument syntax's own text. */
export function argsStart(syntax: ArgSyntax): string {
  return syntax.kind === 'tagged' ? syntax.keyOpen : '{';
}

/** JSON arguments sent as written, without the white space around them; without a closing marker they end where the JSON closes. */
export class JsonArgs implements ArgsParser {
  private held = '';
  private begun = false;
  private readonly depth = new JsonDepth();
  done = false;
  /** The object has closed (with a closing marker still to come, or not). */
  closed = false;

  constructor(
    private readonly sink: CallSink,
    private readonly closes: boolean,
  ) {}

  push(text: string): number {
    if (this.done) return 0;
    let body = text;
    if (!this.begun) {
      body = text.trimStart();
      if (!body) return text.length;
      this.begun = true;
    }
    const skipped = text.length - body.length;
    const closedAt = this.closed ? -1 : this.depth.push(body);
    if (closedAt !== -1) this.closed = true;
    this.done = !this.closes && closedAt !== -1;
    // With a closing marker to come, what follows the object is the call's too (white space, as a rule).
    const taken = closedAt === -1 || this.closes ? body : body.slice(0, closedAt);
    this.held += taken;
    const tail = trailingSpace(this.held);
    const send = this.held.slice(0, this.held.length - tail.length);
    if (send) this.sink.args(send);
    this.held = tail;
    return skipped + taken.length;
  }

  end(): void {
    if (!this.begun) this.sink.args('{}');
  }
}

/** Arguments sent whole once the call closes, converted to JSON text. */
class WholeArgs implements ArgsParser {
  private text = '';
  readonly done = false;

  constructor(
    private readonly sink: CallSink,
    private readonly convert: (text: string) => string,
  ) {}

  push(text: string): number {
    this.text += text;
    return text.length;
  }

  end(): void {
    this.sink.args(this.convert(this.text.trim()) || '{}');
  }
}

/** DeepSeek R1's arguments without their ```json code fence. */
function unfence(text: string): string {
  return text.replace(/^```(?:json)?\s*/, '').replace(/\s*```$/, '');
}

/**
 * Gemma 4's dict as JSON: strings between `quote`s become JSON strings and bare keys are quoted;
 * numbers, booleans, null, lists and nested dicts are JSON already. Text that does not convert is
 * sent as it is (the output check reports arguments that are not JSON).
 */
function dictJson(text: string, quote: string): string {
  let out = '';
  for (let at = 0; at < text.length;) {
    if (text.startsWith(quote, at)) {
      const end = text.indexOf(quote, at + quote.length);
      if (end === -1) return text;
      out += JSON.stringify(text.slice(at + quote.length, end));
      at = end + quote.length;
      continue;
    }
    const key = /^[A-Za-z_][\w-]*(?=\s*:)/.exec(text.slice(at))?.[0];
    if (key && /[{,]\s*$/.test(out)) {
      out += JSON.stringify(key);
      at += key.length;
      continue;
    }
    out += text[at];
    at++;
  }
  try {
    return JSON.stringify(JSON.parse(out));
  } catch {
    return text;
  }
}
