import type { StreamEventBody } from '@cortex/contracts';
import { callParser, JsonArgs, type CallParser, type CallSink } from './call-body.js';
import type { ChatFormat, HarmonySyntax, ToolSyntax } from './chat-format.js';
import { escapeRegExp, scan, trailingSpace } from './scan.js';

/** What the parser sends: the answer, the reasoning, and each tool call as it streams. */
export type ParsedEvent = Extract<StreamEventBody, { type: 'text' | 'reasoning' | 'tool_call' | 'tool_args' }>;

export interface ParserOptions {
  /** The declared tools by name, with their parameters' JSON schema; null takes any name (the syntax alone). */
  readonly tools: ReadonlyMap<string, Record<string, unknown> | undefined> | null;
  /** The prompt left the model inside its reasoning block (the template's generation prompt opened it). */
  readonly startInReasoning?: boolean;
  /** The id of call `index` where the output gives none. */
  readonly callId: (index: number) => string;
  readonly emit: (event: ParsedEvent) => void;
}

/**
 * Reads a model's output as it streams — text with special tokens shown — and sends the answer,
 * the reasoning and the tool calls as events, by the model's format (see ChatFormat). Text that may
 * be the start of a marker is held until the next piece says; a marker never reaches the answer.
 * Fed in any cuts, the events add up to the same answer, reasoning and calls.
 */
export interface OutputParser {
  push(text: string): void;
  /** The output is over: what is held goes out, an open call ends (or is given back as text). */
  end(): void;
  /** Calls sent so far. */
  readonly calls: number;
  /** Calls whose arguments are complete. */
  readonly completedCalls: number;
  /** Inside a call's text now (the call grammar holds the output there). */
  readonly inCall: boolean;
  /** Inside the reasoning now. */
  readonly reasoning: boolean;
  /** The declared tool whose JSON arguments are being written now, for a grammar of its parameters (see CallParser). */
  readonly argumentsFor: string | null;
  /**
   * How many characters at the end of what it read may still reach the answer: text held as the
   * possible start of a marker, the answer's white space it holds; inside a call everything (a call
   * to a tool the request did not declare is given back as text).
   */
  readonly held: number;
}

export function createOutputParser(format: ChatFormat, options: ParserOptions): OutputParser {
  return format.harmony ? new HarmonyParser(format.harmony, options) : new MarkerParser(format, options);
}

/** The calls of one output: each announced once its name is known, numbered in order. */
class Calls implements CallSink {
  count = 0;
  completed = 0;
  private tool: Record<string, unknown> | undefined;

  constructor(private readonly options: ParserOptions) {}

  private declared(name: string): boolean {
    return this.options.tools === null || this.options.tools.has(name);
  }

  start(name: string, id?: string): boolean {
    if (!name || !this.declared(name)) return false;
    const index = this.count++;
    this.tool = this.options.tools?.get(name);
    this.options.emit({ type: 'tool_call', index, id: id ?? this.options.callId(index), name });
    return true;
  }

  args(delta: string): void {
    if (delta) this.options.emit({ type: 'tool_args', index: this.count - 1, delta });
  }

  whole(calls: ReadonlyArray<{ name: string; arguments: string; id?: string }>): boolean {
    if (calls.length === 0 || calls.some((call) => !this.declared(call.name))) return false;
    for (const call of calls) {
      this.start(call.name, call.id);
      this.args(call.arguments);
    }
    return true;
  }

  typesOf(key: string): readonly string[] | undefined {
    const properties = this.tool?.properties as Record<string, Record<string, unknown> | undefined> | undefined;
    return schemaTypes(properties?.[key]);
  }
}

/** The JSON types a schema allows (`type`, a list of types, or the types of its `anyOf`/`oneOf` branches). */
function schemaTypes(schema: Record<string, unknown> | undefined): string[] | undefined {
  if (!schema) return undefined;
  const { type } = schema;
  if (typeof type === 'string') return [type];
  if (Array.isArray(type)) return type.filter((t): t is string => typeof t === 'string');
  const branches = (schema.anyOf ?? schema.oneOf) as Array<Record<string, unknown>> | undefined;
  if (!Array.isArray(branches)) return undefined;
  const types = branches.flatMap((branch) => schemaTypes(branch) ?? []);
  return types.length > 0 ? [...new Set(types)] : undefined;
}

type Mode = 'text' | 'reasoning' | 'section' | 'call';

/** Formats whose blocks are marked: reasoning, a section of calls, each call. */
class MarkerParser implements OutputParser {
  private mode: Mode;
  private buffer = '';
  private readonly sink: Calls;
  private body: CallParser | null = null;
  /** The call's text as written, markers included: given back as text when it is not a call to a declared tool. */
  private raw = '';
  private inSection = false;
  /** Something other than white space has been answered (a bare-JSON call can only come first). */
  private answered = false;
  /**
   * White space in the answer: `keep` it, `skip` it (right after the reasoning), or `hold` it (after
   * a call: sent only when an answer follows, dropped before another call or the end).
   */
  private space: 'keep' | 'skip' | 'hold' = 'keep';
  private heldSpace = '';
  /** The reasoning has had text other than white space; `reasoningSpace` is its trailing white space, not sent yet. */
  private reasoningBegun = false;
  private reasoningSpace = '';
  private readonly textMarkers: string[];
  /** What ends the reasoning: its closing marker, and a call where the family's calls end it. */
  private readonly reasoningMarkers: string[];
  /** Between the calls of a section: the next call, or the section's end. */
  private readonly sectionMarkers: string[];
  /** What ends a call: its closing marker, the next call's opening, and inside a section the section's end. */
  private readonly callEnds: { bare: string[]; inSection: string[] };
  private readonly tools: ToolSyntax | undefined;

  constructor(
    private readonly format: ChatFormat,
    private readonly options: ParserOptions,
  ) {
    this.sink = new Calls(options);
    this.mode = options.startInReasoning && format.reasoning ? 'reasoning' : 'text';
    // Calls are looked for only when the request declares tools (or the syntax alone is asked for).
    this.tools = format.tools && (options.tools === null || options.tools.size > 0) ? format.tools : undefined;
    const tools = this.tools;
    // A call can open without its section (Kimi writes bare calls too).
    this.textMarkers = [
      format.reasoning?.open,
      tools?.sectionOpen,
      tools?.callOpen,
      tools?.bareOpen,
      ...(format.strip ?? []),
    ].filter((marker): marker is string => Boolean(marker));
    // An opening marker inside the reasoning opens nothing new: it is markup, dropped.
    this.reasoningMarkers = [
      format.reasoning?.close,
      format.reasoning?.open,
      ...(tools?.endsReasoning ? [tools.sectionOpen, tools.callOpen, tools.bareOpen] : []),
    ].filter((marker): marker is string => Boolean(marker));
    this.sectionMarkers = [tools?.callOpen ?? '', tools?.sectionClose ?? ''];
    this.callEnds = {
      bare: [tools?.callClose ?? '', '', tools?.callOpen ?? ''],
      inSection: [tools?.callClose ?? '', tools?.sectionClose ?? '', tools?.callOpen ?? ''],
    };
  }

  get calls(): number {
    return this.sink.count;
  }

  get completedCalls(): number {
    return this.sink.completed;
  }

  get inCall(): boolean {
    return this.mode === 'call';
  }

  get argumentsFor(): string | null {
    return this.mode === 'call' ? (this.body?.argumentsFor ?? null) : null;
  }

  get reasoning(): boolean {
    return this.mode === 'reasoning';
  }

  get held(): number {
    return this.mode === 'call' ? Infinity : this.buffer.length + this.heldSpace.length;
  }

  push(text: string): void {
    this.buffer += text;
    this.drain(false);
  }

  end(): void {
    this.drain(true);
    if (this.mode === 'call') this.endCall('');
    this.flushSpace();
  }

  private drain(final: boolean): void {
    for (;;) {
      const progressed = this.mode === 'call' ? this.callStep(final) : this.blockStep(final);
      if (!progressed) return;
    }
  }

  /** Text, reasoning or the space between calls: up to the next marker. Returns whether to go on. */
  private blockStep(final: boolean): boolean {
    const { tools } = this;
    if (this.mode === 'text' && tools?.atStart && !this.answered) {
      const trimmed = this.buffer.trimStart();
      if (!trimmed) return this.holdOrFlush(final);
      this.answered = true;
      if (trimmed.startsWith('{') || trimmed.startsWith('[')) {
        this.buffer = trimmed;
        this.openCall('');
        return true;
      }
    }
    const markers =
      this.mode === 'reasoning'
        ? this.reasoningMarkers
        : this.mode === 'section'
          ? this.sectionMarkers
          : this.textMarkers;
    const found = scan(this.buffer, markers, final);
    const upto = found.at !== -1 ? found.at : final ? this.buffer.length : found.safe;
    this.out(this.buffer.slice(0, upto));
    this.buffer = this.buffer.slice(found.at !== -1 ? found.at + found.marker.length : upto);
    if (found.at === -1) return false;
    this.onMarker(found.marker);
    return true;
  }

  private holdOrFlush(final: boolean): boolean {
    if (final) {
      this.out(this.buffer);
      this.buffer = '';
    }
    return false;
  }

  private onMarker(marker: string): void {
    const { format, tools } = this;
    if (this.mode === 'reasoning') {
      if (marker === format.reasoning?.open) return;
      this.mode = 'text';
      // The white space around the reasoning, and before the answer that follows it, is layout.
      this.reasoningSpace = '';
      this.space = 'skip';
      // A call that ended the reasoning is read as one.
      if (marker !== format.reasoning?.close) this.onMarker(marker);
      return;
    }
    if (format.reasoning && marker === format.reasoning.open && this.mode === 'text') {
      this.mode = 'reasoning';
      this.reasoningBegun = false;
      return;
    }
    if (format.strip?.includes(marker) && this.mode === 'text') return;
    if (!tools) return;
    if (marker === tools.sectionClose) {
      this.inSection = false;
      this.mode = 'text';
      return;
    }
    if (marker === tools.sectionOpen && this.mode === 'text') {
      this.inSection = true;
      this.mode = 'section';
      return;
    }
    if (marker === tools.bareOpen && marker !== tools.callOpen) {
      // The call's own text: read by its body, which expects it.
      this.openCall('');
      this.buffer = marker + this.buffer;
      return;
    }
    this.openCall(marker);
  }

  private openCall(marker: string): void {
    const tools = this.tools as ToolSyntax;
    // White space between calls is layout.
    this.heldSpace = '';
    this.raw = marker;
    this.mode = 'call';
    this.body = callParser(tools.body, this.sink, tools.callClose !== undefined);
  }

  /** Inside a call: its text goes to the call's body parser up to the marker that ends it. */
  private callStep(final: boolean): boolean {
    const tools = this.tools as ToolSyntax;
    const body = this.body as CallParser;
    // A call ends at its closing marker, the end of its section, or the next call's opening.
    const found = scan(this.buffer, this.inSection ? this.callEnds.inSection : this.callEnds.bare, final);
    const upto = found.at !== -1 ? found.at : final ? this.buffer.length : found.safe;
    const taken = body.push(this.buffer.slice(0, upto));
    this.raw += this.buffer.slice(0, taken);
    this.buffer = this.buffer.slice(taken);
    if (body.done) {
      // The call ended inside its text (its JSON closed): what follows is the answer again.
      this.endCall('');
      return true;
    }
    if (found.at === -1) return false;
    if (found.marker === tools.callOpen && found.marker !== tools.callClose) {
      this.endCall('');
      return true;
    }
    this.buffer = this.buffer.slice(found.marker.length);
    if (found.marker === tools.sectionClose && this.inSection) {
      this.endCall(found.marker);
      this.inSection = false;
      this.mode = 'text';
      return true;
    }
    this.endCall(found.marker);
    return true;
  }

  private endCall(closer: string): void {
    const body = this.body as CallParser;
    this.body = null;
    const raw = this.raw + closer;
    this.raw = '';
    if (body.end()) {
      this.sink.completed = this.sink.count;
      // White space after a call is sent only if an answer follows it.
      this.space = 'hold';
    } else {
      // Not a call to a declared tool: what the model wrote is the answer, so nothing is lost.
      this.space = 'keep';
      this.answerText(raw);
    }
    this.mode = this.inSection ? 'section' : 'text';
  }

  private out(text: string): void {
    if (!text) return;
    if (this.mode === 'reasoning') this.reasoningText(text);
    else if (this.mode === 'text') this.answerText(text);
    // White space between the calls of a section is layout.
    else if (text.trim()) this.answerText(text);
  }

  /** Reasoning without the white space at its two ends: trailing white space waits for what follows it. */
  private reasoningText(text: string): void {
    let body = this.reasoningBegun ? text : text.trimStart();
    if (!body) return;
    this.reasoningBegun = true;
    body = this.reasoningSpace + body;
    const tail = trailingSpace(body);
    this.reasoningSpace = tail;
    if (body.length > tail.length)
      this.options.emit({ type: 'reasoning', text: body.slice(0, body.length - tail.length) });
  }

  private answerText(text: string): void {
    if (!text) return;
    let body = text;
    if (this.space !== 'keep' && !body.trim()) {
      if (this.space === 'hold') this.heldSpace += body;
      return;
    }
    if (this.space === 'skip') body = body.trimStart();
    this.space = 'keep';
    // White space at the end of the answer so far waits: before a call it is layout and dropped.
    body = this.heldSpace + body;
    const tail = this.tools ? trailingSpace(body) : '';
    this.heldSpace = tail;
    body = body.slice(0, body.length - tail.length);
    if (!body) return;
    this.answered = true;
    this.options.emit({ type: 'text', text: body });
  }

  /** The output is over: white space still held belongs to the answer (unless a call came last). */
  private flushSpace(): void {
    if (this.space === 'keep' && this.heldSpace) this.options.emit({ type: 'text', text: this.heldSpace });
    this.heldSpace = '';
  }
}

type HarmonyBody = 'text' | 'reasoning' | 'call' | 'dropped';

/**
 * Harmony (gpt-oss): a run of messages, each a header up to `<|message|>` and a body up to an end
 * marker. The header's channel and recipient say what the body is: `analysis` reasoning, `final`
 * and recipient-less `commentary` (a preamble) the answer, `to=functions.NAME` a call whose body is
 * its JSON arguments.
 */
class HarmonyParser implements OutputParser {
  private phase: 'between' | 'header' | 'body' = 'between';
  private buffer = '';
  private header = '';
  private body: HarmonyBody = 'text';
  private readonly sink: Calls;
  /** The current call's JSON arguments (white space before the end marker is layout), and the tool it names. */
  private args: JsonArgs | null = null;
  private tool: string | null = null;
  /** What ends each phase: a header's start; its message; a body's end (or a new header). */
  private readonly starts: string[];
  private readonly messages: string[];
  private readonly bodyEnds: string[];
  private readonly channelPattern: RegExp;

  constructor(
    private readonly syntax: HarmonySyntax,
    private readonly options: ParserOptions,
  ) {
    this.sink = new Calls(options);
    this.starts = [syntax.start, syntax.channel];
    this.messages = [syntax.message];
    this.bodyEnds = [...syntax.ends, syntax.start, syntax.channel];
    this.channelPattern = new RegExp(`${escapeRegExp(syntax.channel)}\\s*([^\\s<]+)`, 'g');
  }

  get calls(): number {
    return this.sink.count;
  }

  get completedCalls(): number {
    return this.sink.completed;
  }

  get inCall(): boolean {
    return this.phase === 'body' && this.body === 'call';
  }

  get argumentsFor(): string | null {
    return this.inCall && !this.args?.closed ? this.tool : null;
  }

  get reasoning(): boolean {
    return this.phase === 'body' && this.body === 'reasoning';
  }

  get held(): number {
    return this.buffer.length;
  }

  push(text: string): void {
    this.buffer += text;
    this.drain(false);
  }

  end(): void {
    this.drain(true);
    // A header cut short (the output ended inside it) is markup, not answer.
    if (this.phase === 'body') this.endBody();
    this.phase = 'between';
  }

  private drain(final: boolean): void {
    const { syntax } = this;
    for (;;) {
      if (this.phase === 'between') {
        // A header can begin with its recipient (` to=functions.x<|channel|>…`) right after the prompt's `<|start|>assistant`.
        const lead = this.buffer.trimStart();
        const recipientFirst = lead.startsWith('to=') || 'to='.startsWith(lead);
        const found = scan(this.buffer, this.starts);
        if (found.at === -1) {
          if (recipientFirst && !final) return;
          const upto = final ? this.buffer.length : found.safe;
          this.emitText(this.buffer.slice(0, upto));
          this.buffer = this.buffer.slice(upto);
          return;
        }
        if (recipientFirst) this.header = this.buffer.slice(0, found.at);
        else {
          this.emitText(this.buffer.slice(0, found.at));
          this.header = '';
        }
        this.header += found.marker;
        this.buffer = this.buffer.slice(found.at + found.marker.length);
        this.phase = 'header';
        continue;
      }
      if (this.phase === 'header') {
        const found = scan(this.buffer, this.messages);
        if (found.at === -1) {
          this.header += this.buffer.slice(0, found.safe);
          this.buffer = this.buffer.slice(found.safe);
          return;
        }
        this.header += this.buffer.slice(0, found.at);
        this.buffer = this.buffer.slice(found.at + found.marker.length);
        this.openBody();
        continue;
      }
      const found = scan(this.buffer, this.bodyEnds);
      const upto = found.at !== -1 ? found.at : final ? this.buffer.length : found.safe;
      this.bodyText(this.buffer.slice(0, upto));
      this.buffer = this.buffer.slice(found.at !== -1 ? found.at : upto);
      if (found.at === -1) return;
      // An end marker is consumed; a new message's start is read as the next header.
      if (syntax.ends.includes(found.marker)) this.buffer = this.buffer.slice(found.marker.length);
      this.endBody();
      this.phase = 'between';
    }
  }

  /**
   * The header is complete: its (last) channel and its recipient say what the body is. A message to
   * a recipient the request did not declare (gpt-oss's built-in `python`, `container.exec`) is
   * dropped, as llama.cpp does: the client has no such tool.
   */
  private openBody(): void {
    const { syntax, header } = this;
    const channels = [...header.matchAll(this.channelPattern)];
    const channel = channels.at(-1)?.[1] ?? '';
    const recipients = [...header.matchAll(/(?:^|\s)to=([^\s<]+)/g)]
      .map((match) => match[1] as string)
      .filter((to) => to !== 'assistant');
    const recipient = recipients.at(-1);
    this.phase = 'body';
    if (recipient !== undefined) {
      const name = recipient.startsWith(syntax.functionPrefix)
        ? recipient.slice(syntax.functionPrefix.length)
        : recipient;
      this.body = this.sink.start(name) ? 'call' : 'dropped';
      this.tool = name;
      this.args = new JsonArgs(this.sink, true);
      return;
    }
    this.body = syntax.reasoningChannels.includes(channel) ? 'reasoning' : 'text';
  }

  private bodyText(text: string): void {
    if (!text) return;
    if (this.body === 'reasoning') this.options.emit({ type: 'reasoning', text });
    else if (this.body === 'call') this.args?.push(text);
    else if (this.body === 'text') this.emitText(text);
  }

  private endBody(): void {
    if (this.body === 'call') {
      this.args?.end();
      this.sink.completed = this.sink.count;
    }
    this.body = 'text';
  }

  private emitText(text: string): void {
    if (text) this.options.emit({ type: 'text', text });
  }
}
