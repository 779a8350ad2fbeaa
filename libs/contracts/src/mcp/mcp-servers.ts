/** An MCP server's label (`mcp.servers[].label`, a request's `server_label`): OpenAI's rule, letters, digits, `_` and `-`. */
export const MCP_SERVER_LABEL = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * Header names neither the config (`mcp.servers[].headers`) nor a request's `mcp` tool may set: the
 * MCP transports' own (session, protocol version, resumption) and HTTP's framing.
 */
export const RESERVED_MCP_HEADERS: ReadonlySet<string> = new Set([
  'accept',
  'connection',
  'content-length',
  'content-type',
  'host',
  'keep-alive',
  'last-event-id',
  'mcp-protocol-version',
  'mcp-session-id',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

/** The most headers one MCP server is sent (config and request together), and their bytes. */
export const MAX_MCP_HEADERS = 32;
export const MAX_MCP_HEADER_BYTES = 16 * 1024;

/**
 * Checks headers meant for an MCP server: RFC 9110 token names (any case; compared in lower case),
 * string values on one line, none reserved, at most MAX_MCP_HEADERS of at most MAX_MCP_HEADER_BYTES in
 * all. The first problem as `<name>: <why>` (or a sentence about them all), or null. Values are never
 * quoted: they are credentials.
 */
export function mcpHeadersProblem(headers: Record<string, unknown>): string | null {
  const entries = Object.entries(headers);
  if (entries.length > MAX_MCP_HEADERS) return `at most ${MAX_MCP_HEADERS} headers (got ${entries.length})`;
  let bytes = 0;
  for (const [name, value] of entries) {
    if (!/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/.test(name)) return `${JSON.stringify(name)}: is not a header name`;
    if (RESERVED_MCP_HEADERS.has(name.toLowerCase())) return `${name}: is set by the MCP transport and cannot be given`;
    if (typeof value !== 'string' || /[\r\n\0]/.test(value)) return `${name}: must be a string on one line`;
    bytes += name.length + Buffer.byteLength(value);
  }
  if (bytes > MAX_MCP_HEADER_BYTES) return `the headers are more than ${MAX_MCP_HEADER_BYTES} bytes together`;
  return null;
}

/** How a tool call of an MCP server ended: answered, answered with the tool's own error, out of time, cancelled, or failed to reach. */
export const MCP_CALL_OUTCOMES = ['ok', 'tool_error', 'timeout', 'cancelled', 'failed'] as const;
export type McpCallOutcome = (typeof MCP_CALL_OUTCOMES)[number];

/**
 * A tool call a gateway ran for a request (`llm.evt.v1.mcp.tool_called`), for the metrics service.
 * `server` is a registered server's label, or `(request url)` for one a request named by URL, whose
 * tools are then not named either (a client chooses both).
 */
export interface McpToolCalledEvent {
  requestId: string;
  server: string;
  tool: string;
  outcome: McpCallOutcome;
  durationMs: number;
  at: number;
}

/** What a server a request named by URL is counted as, its tools too. */
export const MCP_REQUEST_URL_SERVER = '(request url)';
