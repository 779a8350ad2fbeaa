import { callParser, type CallParser } from './call-body.js';
import type { ChatFormat, ToolSyntax } from './chat-format.js';
import type { OutputParser, ParserOptions } from './output-parser.js';
import { Calls } from './output-calls.js';
import { scan, trailingSpace } from './scan.js';

type Mode = 'text' | 'reasoning' | 'section' | 'call';

/** Formats whose blocks are marked: reasoning, a section of calls, each call. */
export class MarkerParser implements OutputParser {
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
