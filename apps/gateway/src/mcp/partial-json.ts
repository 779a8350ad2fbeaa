/** Deeper nesting than this is refused: a cut message is read by recursion, and a hostile one must not exhaust the stack. */
const MAX_DEPTH = 256;

/** Marks a value the text ends inside of that cannot stand for anything (a number, `true`, a key without its value). */
const CUT = Symbol('cut');

/**
 * The JSON value a text that may end mid-document begins with: what it holds so far, with the open
 * arrays and objects closed, a string cut short kept as far as it goes (an escape or surrogate pair
 * left half-written dropped), and a number, literal or key the text ends inside left out. A whole
 * object or array reads as `JSON.parse` reads it. Throws a SyntaxError for text that is not the beginning
 * of a JSON document. This is how a tool's answer cut at the byte cap is still read as far as it got.
 */
export function parsePartialJson(text: string): unknown {
  const reader = new PartialReader(text);
  reader.space();
  if (reader.ended()) throw new SyntaxError('no JSON value: the text is empty');
  const value = reader.value(0);
  if (value === CUT) throw new SyntaxError('the text ends inside its first value');
  reader.space();
  if (!reader.ended()) throw new SyntaxError(`unexpected ${JSON.stringify(text[reader.at])} after the JSON value`);
  return value;
}

class PartialReader {
  at = 0;
  constructor(private readonly text: string) {}

  ended(): boolean {
    return this.at >= this.text.length;
  }

  space(): void {
    while (!this.ended() && ' \t\n\r'.includes(this.text[this.at]!)) this.at++;
  }

  value(depth: number): unknown {
    if (depth > MAX_DEPTH) throw new SyntaxError(`nested deeper than ${MAX_DEPTH} levels`);
    const c = this.text[this.at];
    if (c === '{') return this.object(depth);
    if (c === '[') return this.array(depth);
    if (c === '"') return this.string().value;
    return this.primitive();
  }

  private object(depth: number): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    this.at++;
    for (;;) {
      this.space();
      if (this.ended()) return out;
      if (this.text[this.at] === '}') {
        this.at++;
        return out;
      }
      if (this.text[this.at] !== '"') throw this.unexpected('a key');
      const key = this.string();
      this.space();
      if (!key.closed || this.ended()) return out;
      if (this.text[this.at] !== ':') throw this.unexpected("':'");
      this.at++;
      this.space();
      if (this.ended()) return out;
      const value = this.value(depth + 1);
      if (value === CUT) return out;
      // Own data property even for "__proto__": a parsed document never reaches a prototype.
      Object.defineProperty(out, key.value, { value, enumerable: true, writable: true, configurable: true });
      this.space();
      if (this.ended()) return out;
      const next = this.text[this.at++];
      if (next === '}') return out;
      if (next !== ',') throw this.unexpected("',' or '}'", this.at - 1);
    }
  }

  private array(depth: number): unknown[] {
    const out: unknown[] = [];
    this.at++;
    for (;;) {
      this.space();
      if (this.ended()) return out;
      if (this.text[this.at] === ']') {
        this.at++;
        return out;
      }
      const value = this.value(depth + 1);
      if (value === CUT) return out;
      out.push(value);
      this.space();
      if (this.ended()) return out;
      const next = this.text[this.at++];
      if (next === ']') return out;
      if (next !== ',') throw this.unexpected("',' or ']'", this.at - 1);
    }
  }

  private string(): { value: string; closed: boolean } {
    this.at++;
    let out = '';
    let run = this.at;
    while (!this.ended()) {
      const c = this.text[this.at]!;
      if (c === '"') {
        out += this.text.slice(run, this.at);
        this.at++;
        return { value: out, closed: true };
      }
      if (c !== '\\') {
        this.at++;
        continue;
      }
      out += this.text.slice(run, this.at);
      const escape = this.text[this.at + 1];
      if (escape === undefined) return this.cutString(out);
      if (escape === 'u') {
        const hex = this.text.slice(this.at + 2, this.at + 6);
        if (hex.length < 4) return this.cutString(out);
        if (!/^[0-9a-fA-F]{4}$/.test(hex)) throw this.unexpected('four hexadecimal digits');
        out += String.fromCharCode(parseInt(hex, 16));
        this.at += 6;
      } else {
        const simple = SIMPLE_ESCAPES[escape];
        if (simple === undefined) throw this.unexpected('an escape');
        out += simple;
        this.at += 2;
      }
      run = this.at;
    }
    return this.cutString(out + this.text.slice(run));
  }

  /** A string the text ends inside: as far as it goes, less a high surrogate whose pair was cut off. */
  private cutString(out: string): { value: string; closed: boolean } {
    this.at = this.text.length;
    const last = out.charCodeAt(out.length - 1);
    return { value: last >= 0xd800 && last <= 0xdbff ? out.slice(0, -1) : out, closed: false };
  }

  private primitive(): unknown {
    const match = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?|^(true|false|null)/.exec(
      this.text.slice(this.at, this.at + 400),
    );
    if (!match) {
      const rest = this.text.slice(this.at);
      // The beginning of a literal the text ends inside, or a minus sign alone.
      if (rest === '-' || ['true', 'false', 'null'].some((word) => word.startsWith(rest))) {
        this.at = this.text.length;
        return CUT;
      }
      throw this.unexpected('a value');
    }
    this.at += match[0].length;
    // A number that runs to the end of the text may have been cut (12 of 1234, or 1. of 1.5).
    if (this.ended() && match[4] === undefined) return CUT;
    if (!this.ended() && match[4] === undefined && /[.eE]/.test(this.text[this.at]!)) {
      this.at = this.text.length;
      return CUT;
    }
    return JSON.parse(match[0]) as unknown;
  }

  private unexpected(what: string, at = this.at): SyntaxError {
    const found = this.text[at];
    return new SyntaxError(
      `expected ${what} at ${at}, found ${found === undefined ? 'the end' : JSON.stringify(found)}`,
    );
  }
}

const SIMPLE_ESCAPES: Record<string, string> = {
  '"': '"',
  '\\': '\\',
  '/': '/',
  b: '\b',
  f: '\f',
  n: '\n',
  r: '\r',
  t: '\t',
};
