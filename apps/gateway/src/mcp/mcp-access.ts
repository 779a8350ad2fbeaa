import { createHash } from 'node:crypto';
import { inspect } from 'node:util';
import ipaddr from 'ipaddr.js';
import type { McpConfig } from '@cortex/config';
import { CortexError, MCP_SERVER_LABEL, mcpHeadersProblem, mcpServerAllowed, type KeyRecord } from '@cortex/contracts';
import { publicAddress } from '../media/image-source.js';

/**
 * A request's MCP tool as the dialects write it: OpenAI Responses' `{type: "mcp", server_label,
 * server_url?, headers?, allowed_tools?}`; Anthropic's `mcp_servers[]` entry maps onto it (`name` →
 * `server_label`, `url` → `server_url`, `authorization_token` → `headers.authorization: Bearer …`,
 * `tool_configuration.allowed_tools` → `allowed_tools`). Unchecked: it comes from a request body.
 */
export interface McpToolSpec {
  server_label?: unknown;
  server_url?: unknown;
  headers?: unknown;
  allowed_tools?: unknown;
}

/** Which of a server's tools a request sees and may call: by name (null: every one), and only read-only ones. */
export interface ToolFilter {
  names: ReadonlySet<string> | null;
  readOnly: boolean;
}

/**
 * A request's headers for an MCP server (names in lower case): credentials, so they stay out of JSON
 * and of `util.inspect` (a reference logged or stored shows how many there are, not what), and
 * sessions and tool lists are kept under their hash.
 */
export class McpCredentials {
  readonly #headers: Readonly<Record<string, string>>;
  /** The SHA-256 of the headers in name order ('' for none). */
  readonly key: string;

  constructor(headers: Record<string, string>) {
    this.#headers = Object.freeze({ ...headers });
    const entries = Object.entries(headers).sort(([a], [b]) => a.localeCompare(b));
    this.key = entries.length === 0 ? '' : createHash('sha256').update(JSON.stringify(entries)).digest('hex');
  }

  get headers(): Record<string, string> {
    return { ...this.#headers };
  }

  get count(): number {
    return Object.keys(this.#headers).length;
  }

  toJSON(): string {
    return `[${this.count} header(s)]`;
  }

  [inspect.custom](): string {
    return this.toJSON();
  }
}

/**
 * One request's MCP server, checked: where it is, how it is spoken to, what it may be sent, and its
 * bounds. It holds no credential of the config's (those stay in the service), and the request's own
 * only as McpCredentials.
 */
export interface McpServerRef {
  label: string;
  /** The server's pool: `label:<label>` for a registered one, `url:<url>` for a request's URL. */
  id: string;
  /** Its place in `mcp.servers`; null for a request's URL. */
  index: number | null;
  /** Where it is in the config (`mcp.servers[2]`), or `mcp` for a request's URL: what messages name. */
  where: string;
  transport: 'streamable_http' | 'sse' | 'stdio';
  url: string | null;
  /** The request's headers; a registered server's own are added when it is reached, and win. */
  credentials: McpCredentials;
  tools: ToolFilter;
  timeoutMs: number;
  maxOutputBytes: number;
  maxConcurrency: number;
  /** The request field errors about this server name (`tools[2]`, `mcp_servers[0]`). */
  param: string;
}

/** What a dialect calls the fields of its MCP tool, for errors: OpenAI's names, or Anthropic's (see ANTHROPIC_MCP_FIELDS). */
export interface McpFieldNames {
  label: string;
  url: string;
  headers: string;
  allowedTools: string;
}

export const OPENAI_MCP_FIELDS: McpFieldNames = {
  label: 'server_label',
  url: 'server_url',
  headers: 'headers',
  allowedTools: 'allowed_tools',
};

/** The longest server URL a request may give. */
const MAX_URL_LENGTH = 2_048;

/**
 * A request's MCP tool made a server reference, or the error that refuses it: a label the config does
 * not register (400), a URL when `mcp.allow_request_urls` is off (400), a URL naming a non-public
 * address without `mcp.allow_private_urls` (400; host names are checked when connecting, by the same
 * rule), a server the key's `mcp_servers` leaves out (403 `permission_denied`, naming the label).
 * `key` is the request's stored key, or null (a static key, or none): no list of servers then.
 */
export function resolveMcpServer(
  mcp: McpConfig,
  spec: unknown,
  key: Pick<KeyRecord, 'id' | 'name' | 'mcp_servers'> | null,
  param: string,
  fields: McpFieldNames = OPENAI_MCP_FIELDS,
): McpServerRef {
  if (spec === null || typeof spec !== 'object' || Array.isArray(spec)) throw bad(param, 'must be an object');
  const tool = spec as McpToolSpec;
  const label = tool.server_label;
  if (typeof label !== 'string' || !MCP_SERVER_LABEL.test(label))
    throw bad(`${param}.${fields.label}`, 'must be 1-64 letters, digits, _ or -');
  const index = mcp.servers.findIndex((server) => server.label === label);
  const registered = index === -1 ? null : mcp.servers[index]!;
  const headers = headersOf(tool.headers, `${param}.${fields.headers}`);
  const url = tool.server_url ?? undefined;
  if (url === undefined) {
    if (!registered)
      throw bad(
        `${param}.${fields.label}`,
        `no MCP server is registered as '${label}' on this gateway (${listed(mcp)})` +
          (mcp.allowRequestUrls ? `; give its ${fields.url} to reach one by URL` : ''),
      );
    if (key && !mcpServerAllowed(key, label))
      throw new CortexError(
        'permission_denied',
        `the API key ${key.id} ("${key.name}") may not use the MCP server '${label}'; it may use: ${key.mcp_servers?.join(', ')}`,
        { param: `${param}.${fields.label}` },
      );
    if (registered.command !== undefined && Object.keys(headers).length > 0)
      throw bad(
        `${param}.${fields.headers}`,
        `the MCP server '${label}' runs beside the gateway (stdio), which sends no headers; leave them out`,
      );
    return {
      label,
      id: `label:${label}`,
      index,
      where: `mcp.servers[${index}]`,
      transport: registered.command !== undefined ? 'stdio' : (registered.transport ?? 'streamable_http'),
      url: registered.url ?? null,
      credentials: new McpCredentials(headers),
      tools: filterOf(registered.allowedTools, tool.allowed_tools, `${param}.${fields.allowedTools}`),
      timeoutMs: registered.timeoutMs ?? mcp.callTimeoutMs,
      maxOutputBytes: registered.maxOutputBytes ?? mcp.maxOutputBytes,
      maxConcurrency: registered.maxConcurrency ?? mcp.maxConcurrency,
      param,
    };
  }
  if (!mcp.allowRequestUrls)
    throw bad(
      `${param}.${fields.url}`,
      `this gateway does not reach MCP servers named by URL (mcp.allow_request_urls is off); ` +
        `name one it registers by ${fields.label} alone (${listed(mcp)})`,
    );
  if (registered)
    throw bad(
      `${param}.${fields.label}`,
      `'${label}' is the label of an MCP server this gateway registers; leave ${fields.url} out to use it, or choose another label`,
    );
  if (key && key.mcp_servers != null)
    throw new CortexError(
      'permission_denied',
      `the API key ${key.id} ("${key.name}") may use only the MCP servers ${key.mcp_servers.join(', ')}, not one named by URL`,
      { param: `${param}.${fields.url}` },
    );
  const target = urlOf(url, `${param}.${fields.url}`, mcp.allowPrivateUrls);
  return {
    label,
    id: `url:${target.href}`,
    index: null,
    where: 'mcp',
    // The older SSE transport's endpoints end in /sse by convention; everything else is Streamable HTTP.
    transport: /\/sse\/?$/.test(target.pathname) ? 'sse' : 'streamable_http',
    url: target.href,
    credentials: new McpCredentials(headers),
    tools: filterOf(undefined, tool.allowed_tools, `${param}.${fields.allowedTools}`),
    timeoutMs: mcp.callTimeoutMs,
    maxOutputBytes: mcp.maxOutputBytes,
    maxConcurrency: mcp.maxConcurrency,
    param,
  };
}

/** Whether a tool (by name, with its annotations when known) passes a request's filter. */
export function toolAllowed(filter: ToolFilter, name: string, annotations?: { readOnlyHint?: boolean }): boolean {
  if (filter.names && !filter.names.has(name)) return false;
  return !filter.readOnly || annotations?.readOnlyHint === true;
}

function urlOf(value: unknown, param: string, allowPrivate: boolean): URL {
  if (typeof value !== 'string' || value.length > MAX_URL_LENGTH)
    throw bad(param, `must be an http(s) URL of at most ${MAX_URL_LENGTH} characters`);
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw bad(param, `is not a valid URL: ${JSON.stringify(value.slice(0, 200))}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw bad(param, `must be an http or https URL (got ${url.protocol})`);
  if (url.username || url.password)
    throw bad(param, 'carries credentials; send them in headers (authorization), which are never logged');
  url.hash = '';
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (!allowPrivate && ipaddr.isValid(host) && !publicAddress(host))
    throw refusedAddress(param, `names ${host}, a non-public address`);
  return url;
}

/** The 400 for a request URL whose host is, or resolves to, a non-public address. */
export function refusedAddress(param: string, what: string): CortexError {
  return bad(param, `${what}; the gateway reaches MCP servers at public addresses only (mcp.allow_private_urls)`);
}

function headersOf(value: unknown, param: string): Record<string, string> {
  if (value === undefined || value === null) return {};
  if (typeof value !== 'object' || Array.isArray(value))
    throw bad(param, 'must be an object of header names to values');
  const problem = mcpHeadersProblem(value as Record<string, unknown>);
  if (problem) throw bad(param, problem);
  return Object.fromEntries(Object.entries(value as Record<string, string>).map(([k, v]) => [k.toLowerCase(), v]));
}

/** The config's `allowed_tools` and the request's (a list, or `{tool_names, read_only}`): a tool must pass both. */
function filterOf(configured: string[] | undefined, requested: unknown, param: string): ToolFilter {
  let names: string[] | null = configured ?? null;
  let readOnly = false;
  if (requested !== undefined && requested !== null) {
    const body = Array.isArray(requested) ? { tool_names: requested } : requested;
    if (typeof body !== 'object') throw bad(param, 'must be a list of tool names or {tool_names, read_only}');
    const { tool_names: toolNames, read_only: onlyReading, ...rest } = body as Record<string, unknown>;
    const unknown = Object.keys(rest)[0];
    if (unknown !== undefined) throw bad(`${param}.${unknown}`, 'is not a known field (known: tool_names, read_only)');
    if (toolNames !== undefined) {
      if (!Array.isArray(toolNames) || toolNames.some((name) => typeof name !== 'string'))
        throw bad(param, 'must list tool names (strings)');
      names = names === null ? toolNames : names.filter((name) => toolNames.includes(name));
    }
    if (onlyReading !== undefined && typeof onlyReading !== 'boolean')
      throw bad(`${param}.read_only`, 'must be true or false');
    readOnly = onlyReading === true;
  }
  return { names: names === null ? null : new Set(names), readOnly };
}

function listed(mcp: McpConfig): string {
  return mcp.servers.length === 0 ? 'it registers none' : `registered: ${mcp.servers.map((s) => s.label).join(', ')}`;
}

function bad(param: string, why: string): CortexError {
  return new CortexError('invalid_request', `${param}: ${why}`, { param });
}
