/** One SSE frame, written in one piece: optional `event:` line, one-line JSON `data:`, LF endings. */
export function sseFrame(data: unknown, event?: string): string {
  const payload = typeof data === 'string' ? data : JSON.stringify(data);
  return event ? `event: ${event}\ndata: ${payload}\n\n` : `data: ${payload}\n\n`;
}

/** A comment frame; clients ignore it, proxies see traffic. */
export function sseComment(text: string): string {
  return `: ${text.replace(/[\r\n]+/g, ' ')}\n\n`;
}

export const SSE_DONE = 'data: [DONE]\n\n';

export interface SseMessage {
  event?: string;
  data: string;
}

/**
 * Incremental SSE parser (WHATWG rules: `\n`, `\r\n` or `\r` line ends, comment lines, multi-line data).
 * Feed it chunks split anywhere; it returns the messages completed by each chunk.
 */
export class SseParser {
  private buffer = '';
  private event: string | undefined;
  private data: string[] = [];

  push(chunk: string): SseMessage[] {
    this.buffer += chunk;
    const out: SseMessage[] = [];
    for (;;) {
      const match = /\r\n|\r|\n/.exec(this.buffer);
      if (!match) break;
      // A lone \r at the very end may be the first half of \r\n: wait for the next chunk.
      if (match[0] === '\r' && match.index === this.buffer.length - 1) break;
      const line = this.buffer.slice(0, match.index);
      this.buffer = this.buffer.slice(match.index + match[0].length);
      if (line === '') {
        if (this.data.length > 0) out.push({ event: this.event, data: this.data.join('\n') });
        this.event = undefined;
        this.data = [];
        continue;
      }
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon === -1 ? line : line.slice(0, colon);
      let value = colon === -1 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'event') this.event = value;
      else if (field === 'data') this.data.push(value);
    }
    return out;
  }
}
