import type { ArgsParser } from './call-args.js';
import type { CallSink } from './call-body.js';
import type { ArgSyntax } from './chat-format.js';
import { scan } from './scan.js';

/**
 * Arguments written one tag pair each, turned into a JSON object as they stream: each key as soon as
 * its tag closes, a string value character by character (escaped), any other value whole once its tag
 * closes, converted by the type the tool declares (without one, JSON where the value parses as JSON).
 */
export class TaggedArgs implements ArgsParser {
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
