import { JsonArgs } from './call-args.js';
import type { HarmonySyntax } from './chat-format.js';
import type { OutputParser, ParserOptions } from './output-parser.js';
import { Calls } from './output-calls.js';
import { escapeRegExp, scan } from './scan.js';

type HarmonyBody = 'text' | 'reasoning' | 'call' | 'dropped';

/**
 * Harmony (gpt-oss): a run of messages, each a header up to `<|message|>` and a body up to an end
 * marker. The header's channel and recipient say what the body is: `analysis` reasoning, `final`
 * and recipient-less `commentary` (a preamble) the answer, `to=functions.NAME` a call whose body is
 * its JSON arguments.
 */
export class HarmonyParser implements OutputParser {
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
