import type { JSONRPCMessage, RequestId } from '@modelcontextprotocol/sdk/types.js';
import { parsePartialJson } from './partial-json.js';
import { CUT_META, renderPart } from './tool-result.js';

/**
 * Bytes one JSON-RPC message may take beyond `max_output_bytes`: its envelope, the parts besides the
 * text, a structured copy of the text (servers often send both), or a tool list.
 */
export const MESSAGE_MARGIN_BYTES = 1024 * 1024;

/** The most bytes of one message from a server the gateway holds: past it the message is cut (see MessageBytes). */
export const messageLimit = (maxOutputBytes: number): number => maxOutputBytes + MESSAGE_MARGIN_BYTES;

/** The JSON-RPC error code of an answer that was no tool result and too large to read (the implementation-defined range). */
export const ANSWER_TOO_LARGE = -32_099;

/** The last bytes of a cut message kept after its head: where a message whose `id` comes last (the TypeScript SDK's) names it. */
const TAIL_BYTES = 256;

/**
 * One message's bytes as they arrive, kept up to `limit`. Past it only the first `limit` bytes and the
 * last TAIL_BYTES are held, whatever the message's size, so a 50 MB answer costs `limit` bytes.
 */
export class MessageBytes {
  private head: Buffer[] = [];
  private headBytes = 0;
  private tail: Buffer = Buffer.alloc(0);
  total = 0;

  constructor(readonly limit: number) {}

  get over(): boolean {
    return this.total > this.limit;
  }

  get empty(): boolean {
    return this.total === 0;
  }

  append(chunk: Buffer): void {
    this.total += chunk.length;
    if (this.headBytes < this.limit) {
      const take = chunk.subarray(0, this.limit - this.headBytes);
      this.head.push(take);
      this.headBytes += take.length;
    }
    if (this.over) {
      const joined = this.tail.length === 0 ? chunk : Buffer.concat([this.tail, chunk]);
      this.tail = Buffer.from(joined.subarray(Math.max(0, joined.length - TAIL_BYTES)));
    } else this.tail = Buffer.alloc(0);
  }

  /** The whole message (when it is not over the limit), or the head of a cut one. */
  bytes(): Buffer {
    return Buffer.concat(this.head);
  }

  /** The head as text, less a character the cut split. */
  headText(): string {
    return new TextDecoder().decode(this.bytes(), { stream: true });
  }

  tailText(): string {
    return this.tail.toString('utf8');
  }

  reset(): void {
    this.head = [];
    this.headBytes = 0;
    this.tail = Buffer.alloc(0);
    this.total = 0;
  }
}

/**
 * The message that stands in for one cut at `limit` bytes: a `tools/call` result rebuilt from what
 * arrived (its content read as far as it got, as one text part, marked with CUT_META so the text
 * carries a note), or an error answer for anything else that was a response. Its id is the head's,
 * else the one the tail ends with, else `fallbackId` (the request an HTTP POST carried). Null when it
 * cannot be told whose answer it was, or it was a request or notification from the server: dropped.
 */
export function salvageMessage(
  headText: string,
  tailText: string,
  limit: number,
  fallbackId?: RequestId,
): JSONRPCMessage | null {
  const head = readHead(headText);
  if ('method' in head) return null;
  const id = requestId(head.id) ?? tailId(tailText) ?? fallbackId;
  if (id === undefined) return null;
  const result = head.result;
  if (isRecord(result) && Array.isArray(result.content))
    return {
      jsonrpc: '2.0',
      id,
      result: {
        content: [{ type: 'text', text: result.content.map(renderPart).join('\n') }],
        ...(result.isError === true && { isError: true }),
        _meta: { [CUT_META]: { limit } },
      },
    };
  return {
    jsonrpc: '2.0',
    id,
    error: {
      code: ANSWER_TOO_LARGE,
      message: `the server's answer is larger than ${limit} bytes, the most the gateway reads of one message`,
    },
  };
}

/** What a message's head says at the top level, as far as it can be read. */
function readHead(text: string): Record<string, unknown> {
  try {
    const value = parsePartialJson(text);
    return isRecord(value) ? value : {};
  } catch {
    return {};
  }
}

function requestId(value: unknown): RequestId | undefined {
  return typeof value === 'string' || (typeof value === 'number' && Number.isSafeInteger(value)) ? value : undefined;
}

/** The id a message ends with: `…,"id":7}` closes only the outermost object (a nested one ends in `}}`). */
function tailId(tail: string): RequestId | undefined {
  const match = /"id"\s*:\s*(-?\d{1,15}|"(?:[^"\\]|\\.){0,200}")\s*\}\s*$/.exec(tail);
  if (!match) return undefined;
  try {
    return requestId(JSON.parse(match[1]!));
  } catch {
    return undefined;
  }
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === 'object' && !Array.isArray(value);

/** One line of a stdio server's output: a message's text, or the stand-in for one cut at the limit (null: dropped). */
export type StdioLine = { kind: 'line'; text: string } | { kind: 'cut'; message: JSONRPCMessage | null; bytes: number };

/** Splits a stdio server's output into lines (messages), holding at most `limit` bytes of any one. */
export class LineReader {
  private readonly current: MessageBytes;

  constructor(limit: number) {
    this.current = new MessageBytes(limit);
  }

  push(chunk: Buffer): StdioLine[] {
    const out: StdioLine[] = [];
    let from = 0;
    for (;;) {
      const newline = chunk.indexOf(0x0a, from);
      if (newline === -1) break;
      this.current.append(chunk.subarray(from, newline));
      out.push(this.finish());
      from = newline + 1;
    }
    if (from < chunk.length) this.current.append(chunk.subarray(from));
    return out;
  }

  private finish(): StdioLine {
    const line: StdioLine = this.current.over
      ? {
          kind: 'cut',
          message: salvageMessage(this.current.headText(), this.current.tailText(), this.current.limit),
          bytes: this.current.total,
        }
      : { kind: 'line', text: this.current.bytes().toString('utf8').replace(/\r$/, '') };
    this.current.reset();
    return line;
  }
}

/** What a body cap gives on: bytes to pass, and whether the rest of the body is to be left unread. */
export interface CapStep {
  out: Buffer[];
  done: boolean;
}

/**
 * A JSON response body (Streamable HTTP's answer to one POST), held up to `limit`: a body past it is
 * replaced by the stand-in message at once (its id is the POST's own request), and the rest is never
 * read.
 */
export class JsonBodyCap {
  private readonly body: MessageBytes;

  constructor(
    limit: number,
    private readonly requestId: RequestId | undefined,
  ) {
    this.body = new MessageBytes(limit);
  }

  push(chunk: Buffer): CapStep {
    this.body.append(chunk);
    if (!this.body.over) return { out: [], done: false };
    return { out: [this.standIn()], done: true };
  }

  end(): Buffer[] {
    return [this.body.over ? this.standIn() : this.body.bytes()];
  }

  private standIn(): Buffer {
    const message = salvageMessage(this.body.headText(), '', this.body.limit, this.requestId);
    return Buffer.from(message ? JSON.stringify(message) : '');
  }
}

/**
 * An SSE body (Streamable HTTP's stream for a POST or its GET, the older SSE transport's stream), each
 * event held up to `limit` and passed on whole at its end. An event past it is replaced by its
 * stand-in message: at once when it answers the POST's own request (the rest of the body is then
 * left unread), else at its end, read without being held.
 */
export class SseEventCap {
  private readonly event: MessageBytes;
  /** The event's last bytes, to see an event's end ("\n\n", "\r\n\r\n" or "\r\r") across chunks. */
  private recent = '';
  /** The event under way is over the limit and not the POST's answer: read to its end, not held. */
  private dropping = false;

  constructor(
    limit: number,
    private readonly requestId: RequestId | undefined,
  ) {
    this.event = new MessageBytes(limit);
  }

  push(chunk: Buffer): CapStep {
    const out: Buffer[] = [];
    let from = 0;
    while (from < chunk.length) {
      const end = this.eventEnd(chunk, from);
      this.event.append(chunk.subarray(from, end === -1 ? chunk.length : end));
      if (this.event.over && !this.dropping) {
        const early = this.earlyStandIn();
        if (early) return { out: [...out, early], done: true };
        this.dropping = true;
      }
      if (end === -1) break;
      out.push(...this.finish());
      from = end;
    }
    return { out, done: false };
  }

  end(): Buffer[] {
    return this.event.empty ? [] : this.finish();
  }

  /** Where the event under way ends in `chunk` (the index after its blank line), or -1. */
  private eventEnd(chunk: Buffer, from: number): number {
    for (let i = from; i < chunk.length; i++) {
      const c = chunk[i]!;
      if (c !== 0x0a && c !== 0x0d) {
        this.recent = '';
        continue;
      }
      this.recent = (this.recent + String.fromCharCode(c)).slice(-4);
      if (this.recent.endsWith('\n\n') || this.recent.endsWith('\r\n\r\n') || this.recent === '\r\r') {
        this.recent = '';
        // "\r\r\n…" is ambiguous only in theory: SSE writers end lines with one style.
        return i + 1;
      }
    }
    return -1;
  }

  /** The stand-in for an oversized event that answers the POST's request: known from its head alone. */
  private earlyStandIn(): Buffer | null {
    if (this.requestId === undefined) return null;
    const data = eventData(this.event.headText());
    const head = readHead(data);
    if ('method' in head) return null;
    return this.render(salvageMessage(data, '', this.event.limit, this.requestId));
  }

  private finish(): Buffer[] {
    const over = this.event.over;
    const out = over
      ? this.render(salvageMessage(eventData(this.event.headText()), lastLine(this.event.tailText()), this.event.limit))
      : this.event.bytes();
    this.event.reset();
    this.dropping = false;
    return out ? [out] : [];
  }

  private render(message: JSONRPCMessage | null): Buffer | null {
    return message ? Buffer.from(`event: message\ndata: ${JSON.stringify(message)}\n\n`) : null;
  }
}

/** An SSE event's data: its `data:` lines, each less the field name and one space, joined by newlines. */
function eventData(event: string): string {
  return event
    .split(/\r\n|\r|\n/)
    .filter((line) => line === 'data' || line.startsWith('data:'))
    .map((line) => line.slice(5).replace(/^ /, ''))
    .join('\n');
}

/** The tail of an event less its ending blank line: the end of its last data line. */
function lastLine(tail: string): string {
  return tail.replace(/[\r\n]+$/, '');
}
