import type { ArgSyntax, CallBody } from './chat-format.js';
import { escapeRegExp, JsonDepth, scan, trailingSpace } from './scan.js';

/** Where a call's parts go: the parser that owns the call. */
export interface CallSink {
  /** The call's name is known: true when it names a declared tool (its `tool_call` is sent). */
  start(name: string, id?: string): boolean;
  /** A delta of the started call's arguments (JSON text). */
  args(delta: string): void;
  /** Whole calls parsed at the end (list syntaxes): true when every one names a declared tool, and then all are sent. */
  whole(calls: ReadonlyArray<{ name: string; arguments: string; id?: string }>): boolean;
  /** The JSON types the started call's tool declares for an argument, if it declares any. */
  typesOf(key: string): readonly string[] | undefined;
}

/** One call's text, fed as it streams (without the call's opening and closing markers). */
export interface CallParser {
  /** Feeds text; returns how much it took: less than given when the call ended inside it (its JSON closed). */
  push(text: string): number;
  /** The call ended by itself (its JSON closed, without a closing marker): what follows is not the call's. */
  readonly done: boolean;
  /**
   * The declared tool whose JSON arguments are being written now (from the token after the name's
   * separator until the object closes): a grammar of its parameters can hold them. Null otherwise,
   * and for syntaxes whose arguments are not one JSON object of their own.
   */
  readonly argumentsFor: string | null;
  /**
   * The call is over (its closing marker, the next call, the end of the output). True when it was a
   * call to a declared tool; false when nothing was sent and the text is to be given back as text.
   */
  end(): boolean;
}

export function callParser(body: CallBody, sink: CallSink, closes: boolean): CallParser {
  switch (body.kind) {
    case 'json':
      return new JsonCall(body, sink, closes);
    case 'named':
      return new NamedCall(body, sink, closes);
    case 'pythonic':
      return new WholeCall(sink, closes, parsePythonic);
  }
}

/**
 * A JSON object naming the tool and holding its arguments. When the name comes first (Hermes, Llama)
 * the call is announced as soon as the name is known and its arguments stream as written, holding back
 * the object's closing brace; any other shape (a list, the arguments first) is parsed whole at the end.
 */
class JsonCall implements CallParser {
  private raw = '';
  private readonly prefix: RegExp | null;
  private started = false;
  private undeclared = false;
  /** Argument text not sent yet: a trailing `}` and white space may close the wrapper object. */
  private held = '';
  private sentArgs = false;
  private readonly depth = new JsonDepth();
  done = false;
  readonly argumentsFor = null;

  constructor(
    private readonly body: Extract<CallBody, { kind: 'json' }>,
    private readonly sink: CallSink,
    private readonly closes: boolean,
  ) {
    const keys = (list: readonly string[]): string => list.map(escapeRegExp).join('|');
    this.prefix =
      body.list || body.nameAsKey
        ? null
        : new RegExp(
            '^\\s*\\{\\s*(?:"type"\\s*:\\s*"function"\\s*,\\s*)?' +
              `"(?:${keys(body.nameKeys)})"\\s*:\\s*"((?:[^"\\\\]|\\\\.)*)"\\s*,\\s*` +
              `"(?:${keys(body.argKeys)})"\\s*:\\s*`,
          );
  }

  push(text: string): number {
    // Without a closing marker the call ends where its JSON does.
    if (this.done) return 0;
    const closedAt = this.closes ? -1 : this.depth.push(text);
    this.done = closedAt !== -1;
    const taken = closedAt === -1 ? text : text.slice(0, closedAt);
    if (this.started) this.pushArgs(taken);
    else {
      this.raw += taken;
      this.tryStart();
    }
    return taken.length;
  }

  private tryStart(): void {
    if (!this.prefix || this.undeclared) return;
    const match = this.prefix.exec(this.raw);
    if (match?.[1] === undefined) return;
    let name: string;
    try {
      name = JSON.parse(`"${match[1]}"`) as string;
    } catch {
      return;
    }
    if (!this.sink.start(name)) {
      this.undeclared = true;
      return;
    }
    this.started = true;
    const rest = this.raw.slice(match[0].length);
    this.pushArgs(rest);
  }

  private pushArgs(text: string): void {
    // White space before the arguments may come in a later piece than the key that it follows.
    this.held += this.held || this.sentArgs ? text : text.trimStart();
    if (this.held) this.sentArgs = true;
    const tail = closingTail(this.held);
    const send = this.held.slice(0, this.held.length - tail.length);
    if (send) this.sink.args(send);
    this.held = tail;
  }

  end(): boolean {
    if (this.started) {
      const tail = closingTail(this.held);
      const rest = this.held.slice(0, this.held.length - tail.length) + (tail.startsWith('}') ? '' : tail);
      if (rest) this.sink.args(rest);
      return true;
    }
    if (this.undeclared) return false;
    const calls = parseJsonCalls(this.raw, this.body);
    return calls !== null && this.sink.whole(calls);
  }
}

/** What may close the wrapper object at the end of `text`: a `}` and the white space after it (or only white space). */
function closingTail(text: string): string {
  const end = text.trimEnd().length;
  return text.slice(text[end - 1] === '}' ? end - 1 : end);
}

/** The calls a JSON call body holds, or null when it is not one. */
function parseJsonCalls(
  text: string,
  body: Extract<CallBody, { kind: 'json' }>,
): Array<{ name: string; arguments: string; id?: string }> | null {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return null;
  }
  const items = Array.isArray(parsed) ? parsed : [parsed];
  if (Array.isArray(parsed) !== Boolean(body.list) && !body.nameAsKey) return null;
  const calls: Array<{ name: string; arguments: string; id?: string }> = [];
  for (const item of items) {
    if (item === null || typeof item !== 'object' || Array.isArray(item)) return null;
    const record = item as Record<string, unknown>;
    if (body.nameAsKey) {
      for (const [name, args] of Object.entries(record)) calls.push({ name, arguments: argumentText(args) });
      continue;
    }
    const name = body.nameKeys.map((key) => record[key]).find((value) => typeof value === 'string');
    if (typeof name !== 'string') return null;
    const args = body.argKeys.map((key) => record[key]).find((value) => value !== undefined) ?? {};
    const id = body.idKey !== undefined ? record[body.idKey] : undefined;
    calls.push({
      name,
      arguments: argumentText(args),
      ...((typeof id === 'string' || typeof id === 'number') && { id: String(id) }),
    });
  }
  return calls;
}

const argumentText = (args: unknown): string => (typeof args === 'string' ? args : JSON.stringify(args));

/**
 * The name as text, an optional id, then the arguments (`[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{…}`,
 * `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}`, `<function=NAME><parameter=…>`).
 */
class NamedCall implements CallParser {
  private phase: 'prefix' | 'name' | 'id' | 'args' | 'raw' = 'prefix';
  private buffer = '';
  private name = '';
  private id: string | undefined;
  private args: ArgsParser | null = null;
  /** The declared tool the call names, once announced. */
  private tool: string | null = null;

  get done(): boolean {
    return this.args?.done ?? false;
  }

  get argumentsFor(): string | null {
    return this.args instanceof JsonArgs && !this.args.done && !this.args.closed ? this.tool : null;
  }

  constructor(
    private readonly body: Extract<CallBody, { kind: 'named' }>,
    private readonly sink: CallSink,
    private readonly closes: boolean,
  ) {
    if (!body.namePrefix) this.phase = 'name';
  }

  push(text: string): number {
    if (this.phase === 'raw') return text.length;
    if (this.phase === 'args') return this.pushArgs(text, text.length);
    this.buffer += text;
    const fed = text.length;
    for (;;) {
      if (this.phase === 'prefix') {
        const prefix = this.body.namePrefix ?? '';
        const trimmed = this.buffer.trimStart();
        if (trimmed.length < prefix.length && prefix.startsWith(trimmed)) return fed;
        this.buffer = trimmed.startsWith(prefix) ? trimmed.slice(prefix.length) : trimmed;
        this.phase = 'name';
        continue;
      }
      const ends =
        this.phase === 'name' && this.body.idMarker ? [...this.body.nameEnd, this.body.idMarker] : this.body.nameEnd;
      const found = scan(this.buffer, ends);
      if (found.at === -1) return fed;
      const part = this.buffer.slice(0, found.at).trim();
      let rest = this.buffer.slice(found.at + found.marker.length);
      this.buffer = '';
      if (this.phase === 'name') this.name = part;
      else this.id = part;
      if (found.marker === this.body.idMarker) {
        this.phase = 'id';
        this.buffer = rest;
        continue;
      }
      if (!this.announce()) return fed;
      // A name ended by the arguments' own first marker (GLM's `<arg_key>` straight after the name, Gemma's `{`) gives it back to them.
      if (found.marker === argsStart(this.body.args)) rest = found.marker + rest;
      const taken = this.pushArgs(rest, rest.length);
      // The call ended inside what this push brought: give back what the arguments did not take.
      return taken < rest.length ? fed - (rest.length - taken) : fed;
    }
  }

  /** The name (and id) are known: the call starts, or is given back as text when its tool is not declared. */
  private announce(): boolean {
    const pattern = this.body.nameId?.exec(this.name);
    const name = pattern?.[1] ?? this.name;
    const id = pattern ? this.name : this.id;
    if (!this.sink.start(name, id || undefined)) {
      this.phase = 'raw';
      return false;
    }
    this.phase = 'args';
    this.tool = name;
    this.args = argsParser(this.body.args, this.sink, this.closes, this.body.argsClose);
    return true;
  }

  private pushArgs(text: string, length: number): number {
    return this.args ? this.args.push(text) : length;
  }

  end(): boolean {
    if (this.phase === 'raw') return false;
    if (this.phase === 'args' && this.args) {
      this.args.end();
      return true;
    }
    // The call closed right after its name (GLM's call without arguments).
    this.name = this.phase === 'name' ? this.buffer.trim() : this.name;
    if (this.phase === 'id') this.id = this.buffer.trim();
    if (!this.name || !this.announce()) return false;
    this.args?.end();
    return true;
  }
}

/** A call's arguments as they stream: deltas of one JSON object. */
interface ArgsParser {
  push(text: string): number;
  end(): void;
  /** The arguments ended by themselves (their JSON closed, the call having no closing marker). */
  readonly done: boolean;
}

function argsParser(syntax: ArgSyntax, sink: CallSink, closes: boolean, argsClose: string | undefined): ArgsParser {
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
function argsStart(syntax: ArgSyntax): string {
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

/**
 * Arguments written one tag pair each, turned into a JSON object as they stream: each key as soon as
 * its tag closes, a string value character by character (escaped), any other value whole once its tag
 * closes, converted by the type the tool declares (without one, JSON where the value parses as JSON).
 */
class TaggedArgs implements ArgsParser {
  readonly done = false;
  private phase: 'between' | 'key' | 'gap' | 'value' | 'done' = 'between';
  private buffer = '';
  private count = 0;
  private key = '';
  /** The value streams as a JSON string (its declared type is string). */
  private streaming = false;
  /** A string value has sent its first character (a leading newline is layout). */
  private valueBegun = false;
  private value = '';

  constructor(
    private readonly syntax: Extract<ArgSyntax, { kind: 'tagged' }>,
    private readonly sink: CallSink,
    private readonly argsClose: string | undefined,
  ) {}

  push(text: string): number {
    this.buffer += text;
    this.drain(false);
    return text.length;
  }

  end(): void {
    if (this.phase === 'done') return;
    this.drain(true);
    if (this.phase === 'value') this.closeValue();
    this.sink.args(this.count === 0 ? '{}' : '}');
    this.phase = 'done';
  }

  private drain(final: boolean): void {
    const { syntax } = this;
    for (;;) {
      switch (this.phase) {
        case 'done':
          this.buffer = '';
          return;
        case 'between': {
          const found = scan(this.buffer, this.argsClose ? [syntax.keyOpen, this.argsClose] : [syntax.keyOpen]);
          if (found.at === -1) {
            this.buffer = this.buffer.slice(found.safe);
            return;
          }
          this.buffer = this.buffer.slice(found.at + found.marker.length);
          if (found.marker === this.argsClose) {
            this.sink.args(this.count === 0 ? '{}' : '}');
            this.phase = 'done';
          } else this.phase = 'key';
          continue;
        }
        case 'key': {
          const found = scan(this.buffer, [syntax.keyClose]);
          if (found.at === -1) return;
          this.key = this.buffer.slice(0, found.at).trim();
          this.buffer = this.buffer.slice(found.at + found.marker.length);
          this.sink.args(`${this.count === 0 ? '{' : ','}${JSON.stringify(this.key)}:`);
          this.count++;
          // Only a value that can be nothing but a string streams; any other waits to be converted whole.
          const types = this.sink.typesOf(this.key);
          this.streaming = types?.length === 1 && types[0] === 'string';
          this.valueBegun = false;
          this.value = '';
          this.phase = syntax.valueOpen ? 'gap' : 'value';
          if (this.streaming && !syntax.valueOpen) this.sink.args('"');
          continue;
        }
        case 'gap': {
          const open = syntax.valueOpen ?? '';
          const found = scan(this.buffer, [open]);
          if (found.at === -1) return;
          this.buffer = this.buffer.slice(found.at + found.marker.length);
          this.phase = 'value';
          if (this.streaming) this.sink.args('"');
          continue;
        }
        case 'value': {
          const found = scan(this.buffer, [syntax.valueClose]);
          const upto = found.at !== -1 ? found.at : final ? this.buffer.length : found.safe;
          this.valueText(this.buffer.slice(0, upto), found.at !== -1 || final);
          this.buffer = this.buffer.slice(found.at !== -1 ? found.at + found.marker.length : upto);
          if (found.at === -1) return;
          this.closeValue();
          this.phase = 'between';
          continue;
        }
      }
    }
  }

  /** Part of a value; `last`: nothing more of it follows. */
  private valueText(text: string, last: boolean): void {
    this.value += text;
    if (!this.streaming) return;
    let send = this.value;
    if (!this.valueBegun && this.syntax.trimNewline) {
      if (send === '' || (send === '\n' && !last)) return;
      if (send.startsWith('\n')) send = send.slice(1);
    }
    // A trailing newline may be the layout before the closing tag.
    const keep = this.syntax.trimNewline && !last && send.endsWith('\n') ? 1 : 0;
    const out = send.slice(0, send.length - keep);
    if (last && this.syntax.trimNewline && out.endsWith('\n')) {
      this.emitString(out.slice(0, -1));
    } else this.emitString(out);
    this.value = send.slice(send.length - keep);
    this.valueBegun = true;
  }

  private emitString(text: string): void {
    if (text) this.sink.args(JSON.stringify(text).slice(1, -1));
  }

  private closeValue(): void {
    if (this.streaming) {
      this.sink.args('"');
      return;
    }
    this.sink.args(
      JSON.stringify(convertValue(this.value, this.sink.typesOf(this.key), this.syntax.trimNewline ?? false)),
    );
  }
}

/**
 * A tagged value as the types its tool declares: JSON of a declared type other than string where it
 * parses as one (`42` for an integer, `null` for a nullable string), else the text as a string where
 * string is declared; without declared types, JSON where it parses as JSON, else a string.
 */
export function convertValue(raw: string, types: readonly string[] | undefined, trimNewline: boolean): unknown {
  const text = trimNewline ? raw.replace(/^\n/, '').replace(/\n$/, '') : raw;
  const trimmed = text.trim();
  let parsed: unknown;
  let parses = true;
  try {
    parsed = JSON.parse(trimmed);
  } catch {
    parses = false;
    const lower = trimmed.toLowerCase();
    // Python's spellings of the booleans, which some models write.
    if (lower === 'true' || lower === 'false') [parsed, parses] = [lower === 'true', true];
  }
  if (!types) return parses ? parsed : text;
  if (parses && types.some((type) => type !== 'string' && jsonType(parsed, type))) return parsed;
  return text;
}

function jsonType(value: unknown, type: string): boolean {
  switch (type) {
    case 'null':
      return value === null;
    case 'boolean':
      return typeof value === 'boolean';
    case 'integer':
      return Number.isInteger(value);
    case 'number':
      return typeof value === 'number';
    case 'array':
      return Array.isArray(value);
    case 'object':
      return value !== null && typeof value === 'object' && !Array.isArray(value);
    default:
      return false;
  }
}

/** A call syntax parsed whole once the call is over (pythonic calls). */
class WholeCall implements CallParser {
  private text = '';
  done = false;
  readonly argumentsFor = null;

  constructor(
    private readonly sink: CallSink,
    private readonly closes: boolean,
    private readonly parse: (text: string) => Array<{ name: string; arguments: string }> | null,
  ) {}

  push(text: string): number {
    if (this.done) return 0;
    this.text += text;
    if (this.closes) return text.length;
    // Without a closing marker the call list ends with its closing bracket.
    const end = this.text.lastIndexOf(']');
    if (end === -1) return text.length;
    const over = this.text.length - end - 1;
    if (this.parse(this.text.slice(0, end + 1)) === null) return text.length;
    this.text = this.text.slice(0, end + 1);
    this.done = true;
    return text.length - over;
  }

  end(): boolean {
    const calls = this.parse(this.text);
    return calls !== null && this.sink.whole(calls);
  }
}

/** `[name(key="value", n=1), other()]` (LFM2): the calls, or null when the text is not such a list. */
export function parsePythonic(text: string): Array<{ name: string; arguments: string }> | null {
  const source = text.trim();
  if (!source.startsWith('[') || !source.endsWith(']')) return null;
  const calls: Array<{ name: string; arguments: string }> = [];
  let at = 1;
  const skip = (): void => {
    while (at < source.length && /[\s,]/.test(source[at] ?? '')) at++;
  };
  for (skip(); at < source.length - 1; skip()) {
    const name = /^[A-Za-z_][\w.-]*/.exec(source.slice(at))?.[0];
    if (!name || source[at + name.length] !== '(') return null;
    at += name.length + 1;
    const args: Record<string, unknown> = {};
    for (;;) {
      while (/\s|,/.test(source[at] ?? '')) at++;
      if (source[at] === ')') {
        at++;
        break;
      }
      const key = /^[A-Za-z_]\w*/.exec(source.slice(at))?.[0];
      if (!key || source[at + key.length] !== '=') return null;
      at += key.length + 1;
      const value = pythonValue(source, at);
      if (!value) return null;
      args[key] = value.value;
      at = value.end;
    }
    calls.push({ name, arguments: JSON.stringify(args) });
  }
  return calls;
}

/** One Python literal at `at`: a string, number, True/False/None, or a list or dict of them written as JSON would be. */
function pythonValue(source: string, at: number): { value: unknown; end: number } | null {
  const quote = source[at];
  if (quote === '"' || quote === "'") {
    let value = '';
    for (let i = at + 1; i < source.length; i++) {
      const char = source[i] as string;
      if (char === '\\') {
        const next = source[++i] ?? '';
        value += next === 'n' ? '\n' : next === 't' ? '\t' : next;
      } else if (char === quote) return { value, end: i + 1 };
      else value += char;
    }
    return null;
  }
  const word = /^(True|False|None|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)/.exec(source.slice(at))?.[0];
  if (word)
    return {
      value: word === 'True' ? true : word === 'False' ? false : word === 'None' ? null : Number(word),
      end: at + word.length,
    };
  if (quote === '[' || quote === '{') {
    const depth = new JsonDepth();
    const closed = depth.push(source.slice(at));
    if (closed === -1) return null;
    const literal = source
      .slice(at, at + closed)
      .replace(/\bTrue\b/g, 'true')
      .replace(/\bFalse\b/g, 'false')
      .replace(/\bNone\b/g, 'null')
      .replace(/'/g, '"');
    try {
      return { value: JSON.parse(literal) as unknown, end: at + closed };
    } catch {
      return null;
    }
  }
  return null;
}
