import { argsParser, argsStart, JsonArgs, type ArgsParser } from './call-args.js';
import type { CallBody } from './chat-format.js';
import { parsePythonic } from './pythonic-calls.js';
import { escapeRegExp, JsonDepth, scan } from './scan.js';

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
