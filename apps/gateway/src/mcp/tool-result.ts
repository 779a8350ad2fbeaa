/** What a tool call gives the model: text, whether the tool reports a failure, and whether the text was cut. */
export interface McpToolResult {
  text: string;
  isError: boolean;
  /** The answer was longer than the server's `max_output_bytes`: `text` ends with a note saying so. */
  truncated: boolean;
}

/** The `_meta` key of a result cortex rebuilt from an answer cut at the transport's cap (see message-cap.ts). */
export const CUT_META = 'cortex/cut';

/** One MCP content part as a line of text: text as it is, anything else described (its bytes are not the model's to read). */
export function renderPart(part: unknown): string {
  if (part === null || typeof part !== 'object') return '[a content part that is not an object]';
  const p = part as Record<string, unknown>;
  const str = (value: unknown): string | undefined => (typeof value === 'string' ? value : undefined);
  switch (p.type) {
    case 'text':
      return str(p.text) ?? '';
    case 'image':
    case 'audio':
      return `[${p.type}: ${str(p.mimeType) ?? 'unknown type'}, ${base64Bytes(str(p.data))} bytes]`;
    case 'resource_link':
      return `[resource link: ${str(p.name) ?? str(p.title) ?? 'unnamed'} <${str(p.uri) ?? ''}>${
        str(p.description) ? ` ${str(p.description)}` : ''
      }]`;
    case 'resource': {
      const resource = (p.resource ?? {}) as Record<string, unknown>;
      const uri = str(resource.uri) ?? '';
      const text = str(resource.text);
      if (text !== undefined) return `[resource <${uri}>]\n${text}`;
      return `[resource <${uri}>: ${str(resource.mimeType) ?? 'unknown type'}, ${base64Bytes(str(resource.blob))} bytes]`;
    }
    default:
      return `[a ${typeof p.type === 'string' ? JSON.stringify(p.type) : 'untyped'} content part]`;
  }
}

/**
 * A `tools/call` result as text for the model: the text parts joined by newlines, other parts
 * described; without content, its structured content as JSON. At most `maxBytes` of UTF-8, cut on a
 * character boundary with a note, also when the transport had already cut the answer (CUT_META).
 */
export function renderToolResult(result: Record<string, unknown>, maxBytes: number): McpToolResult {
  const content = Array.isArray(result.content) ? result.content : [];
  let text = content.map(renderPart).join('\n');
  if (content.length === 0 && result.structuredContent !== undefined) text = JSON.stringify(result.structuredContent);
  const meta = result._meta as Record<string, unknown> | undefined;
  const cutBefore = meta?.[CUT_META] !== undefined;
  const { text: kept, cut } = cutUtf8(text, maxBytes);
  const truncated = cut || cutBefore;
  return {
    text: truncated
      ? `${kept}\n[cortex: the tool's answer was cut at ${maxBytes} bytes (max_output_bytes); the rest is not shown]`
      : kept,
    isError: result.isError === true,
    truncated,
  };
}

/** At most `maxBytes` of `text` in UTF-8, ending on a whole character. */
export function cutUtf8(text: string, maxBytes: number): { text: string; cut: boolean } {
  // A UTF-16 unit is at most 3 bytes, so a text this short cannot be over.
  if (text.length * 3 <= maxBytes) return { text, cut: false };
  const bytes = Buffer.from(text, 'utf8');
  if (bytes.length <= maxBytes) return { text, cut: false };
  let end = maxBytes;
  // Back off continuation bytes (10xxxxxx) to the start of the character the cut falls in.
  while (end > 0 && (bytes[end]! & 0xc0) === 0x80) end--;
  return { text: bytes.subarray(0, end).toString('utf8'), cut: true };
}

function base64Bytes(data: string | undefined): number {
  if (!data) return 0;
  const padding = data.endsWith('==') ? 2 : data.endsWith('=') ? 1 : 0;
  return Math.max(0, Math.floor((data.length * 3) / 4) - padding);
}
