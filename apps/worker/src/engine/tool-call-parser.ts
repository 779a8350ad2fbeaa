import type { StreamEventBody } from '@cortex/contracts';

const PREFIX = /^\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*/;

/**
 * Parses the text between a model's `<tool_call>` and `</tool_call>` markers (Hermes/Qwen style:
 * `{"name": "...", "arguments": {...}}`) as it streams: a `tool_call` event as soon as the name is
 * known, then the arguments as `tool_args` deltas, holding back the object's closing brace. A call in
 * another shape is parsed whole at the end; one that does not parse, or that names a tool the request
 * did not declare, comes back as text: a client must never receive a call to a tool it does not have.
 */
export class ToolCallParser {
  private buffer = '';
  private started = false;
  /** Argument text not yet sent: a trailing `}` and white space may be the end of the wrapper object. */
  private held = '';
  /** The call names an undeclared tool: everything is kept to be given back as text. */
  private undeclared = false;

  constructor(
    private readonly index: number,
    private readonly id: string,
    private readonly emit: (event: StreamEventBody) => void,
    private readonly declared: ReadonlySet<string>,
  ) {}

  push(text: string): void {
    if (this.started) return this.pushArgs(text);
    this.buffer += text;
    if (this.undeclared) return;
    const match = PREFIX.exec(this.buffer);
    if (match?.[1] === undefined) return;
    let name: string;
    try {
      name = JSON.parse(`"${match[1]}"`) as string;
    } catch {
      return;
    }
    if (!this.declared.has(name)) {
      this.undeclared = true;
      return;
    }
    this.started = true;
    this.emit({ type: 'tool_call', index: this.index, id: this.id, name });
    const rest = this.buffer.slice(match[0].length);
    this.buffer = '';
    this.pushArgs(rest);
  }

  /**
   * At the closing marker. Returns whether a tool call was emitted; when not, the raw text is emitted as
   * ordinary text (wrapped in its markers) so nothing the model wrote is lost.
   */
  end(): boolean {
    if (this.started) {
      const tail = this.held.replace(/\}\s*$/, '');
      this.send(tail);
      return true;
    }
    const call = this.undeclared ? null : parseWhole(this.buffer);
    if (!call || !this.declared.has(call.name)) {
      this.emit({ type: 'text', text: `<tool_call>${this.buffer}</tool_call>` });
      return false;
    }
    this.emit({ type: 'tool_call', index: this.index, id: this.id, name: call.name });
    this.emit({ type: 'tool_args', index: this.index, delta: call.arguments });
    return true;
  }

  /** The generation stopped inside the call (max tokens, cancel): give back what was written as text. */
  abandon(): void {
    if (this.started) {
      this.send(this.held);
      return;
    }
    if (this.buffer) this.emit({ type: 'text', text: `<tool_call>${this.buffer}` });
  }

  private pushArgs(text: string): void {
    this.held += text;
    const tail = /\}?\s*$/.exec(this.held)?.[0] ?? '';
    this.send(this.held.slice(0, this.held.length - tail.length));
    this.held = tail;
  }

  private send(delta: string): void {
    if (!delta) return;
    this.emit({ type: 'tool_args', index: this.index, delta });
  }
}

function parseWhole(text: string): { name: string; arguments: string } | null {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return null;
  }
  const call = parsed as { name?: unknown; arguments?: unknown; parameters?: unknown };
  if (typeof call.name !== 'string') return null;
  const args = call.arguments ?? call.parameters ?? {};
  return { name: call.name, arguments: typeof args === 'string' ? args : JSON.stringify(args) };
}

/**
 * Follows JSON text as it streams and says when its top-level value has closed (strings and escapes
 * understood), so a grammar-forced tool call can end the moment its object is complete.
 */
export class JsonEnd {
  private depth = 0;
  private opened = false;
  private inString = false;
  private escaped = false;

  /** Feeds text; true once the first object or array has closed. */
  push(text: string): boolean {
    for (const char of text) {
      if (this.inString) {
        if (this.escaped) this.escaped = false;
        else if (char === '\\') this.escaped = true;
        else if (char === '"') this.inString = false;
      } else if (char === '"') {
        this.inString = true;
      } else if (char === '{' || char === '[') {
        this.depth++;
        this.opened = true;
      } else if (char === '}' || char === ']') {
        this.depth--;
        if (this.opened && this.depth === 0) return true;
      }
    }
    return false;
  }
}
