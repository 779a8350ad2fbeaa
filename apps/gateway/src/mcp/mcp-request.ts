import { CortexError, isObject, MCP_SERVER_LABEL } from '@cortex/contracts';
import type { McpFieldNames } from './mcp-access.js';

/** Which of a server's tools need the client's approval before they run (OpenAI's `require_approval`). */
export type ApprovalRule =
  'always' | 'never' | { readonly always: readonly string[] | null; readonly never: readonly string[] | null };

/**
 * One `mcp` tool of a Responses request: where it stood, its label, and its approval rule, read here;
 * the server it names, its credentials and `allowed_tools` are the MCP client's to resolve (`spec`).
 */
export interface McpToolRequest {
  /** Where it stood in `tools`, for errors (`tools[2]`). */
  readonly param: string;
  readonly serverLabel: string;
  /** The tool as the request wrote it. */
  readonly spec: Record<string, unknown>;
  readonly approval: ApprovalRule;
  /** What the dialect calls the tool's fields, for errors; unset: OpenAI's. */
  readonly fields?: McpFieldNames;
  /** Tools of the server the request turned off (Anthropic's `mcp_toolset` configs). */
  readonly denied?: ReadonlySet<string>;
}

/** A Responses body's tools split: the `mcp` ones, read, and every other tool as it was. */
export interface McpTools {
  readonly servers: McpToolRequest[];
  readonly others: unknown[];
}

/** Whether a body declares any `mcp` tool (then McpLoopRun runs it). */
export function hasMcpTools(body: unknown): boolean {
  return (
    isObject(body) && Array.isArray(body.tools) && body.tools.some((tool) => isObject(tool) && tool.type === 'mcp')
  );
}

/** The `mcp` tools of a body, or null when it has none (the body then runs as it always did). */
export function mcpToolsOf(body: unknown): McpTools | null {
  if (!isObject(body) || !hasMcpTools(body)) return null;
  const tools = body.tools as unknown[];
  const servers: McpToolRequest[] = [];
  const others: unknown[] = [];
  tools.forEach((tool, i) => {
    if (isObject(tool) && tool.type === 'mcp') servers.push(readMcpTool(tool, `tools[${i}]`));
    else others.push(tool);
  });
  const labels = new Set<string>();
  for (const server of servers) {
    if (labels.has(server.serverLabel))
      invalid(`${server.param}.server_label`, `'${server.serverLabel}' is named by another mcp tool of this request`);
    labels.add(server.serverLabel);
  }
  return { servers, others };
}

function readMcpTool(tool: Record<string, unknown>, param: string): McpToolRequest {
  const label = tool.server_label;
  if (typeof label !== 'string' || !MCP_SERVER_LABEL.test(label))
    invalid(`${param}.server_label`, 'must be 1-64 letters, digits, _ or -');
  if (tool.connector_id !== undefined && tool.connector_id !== null)
    invalid(`${param}.connector_id`, "OpenAI's connectors are not served here: name a server_label the gateway knows");
  return {
    param,
    serverLabel: label,
    spec: tool,
    approval: approvalRule(tool.require_approval, `${param}.require_approval`),
  };
}

/** `require_approval`: `always` (OpenAI's default), `never`, or `{always: {tool_names}, never: {tool_names}}`. */
function approvalRule(value: unknown, param: string): ApprovalRule {
  if (value === undefined || value === null || value === 'always') return 'always';
  if (value === 'never') return 'never';
  if (!isObject(value)) invalid(param, "must be 'always', 'never' or {always: {tool_names}, never: {tool_names}}");
  const names = (filter: unknown, at: string): string[] | null => {
    if (filter === undefined || filter === null) return null;
    const list = isObject(filter) ? filter.tool_names : undefined;
    if (!Array.isArray(list) || list.some((name) => typeof name !== 'string'))
      invalid(`${param}.${at}.tool_names`, 'must be a list of tool names');
    return list as string[];
  };
  const rule = value as Record<string, unknown>;
  return { always: names(rule.always, 'always'), never: names(rule.never, 'never') };
}

/** Whether a call of `tool` waits for the client's approval: a tool named under `never` runs, every other waits. */
export function needsApproval(rule: ApprovalRule, tool: string): boolean {
  if (rule === 'always' || rule === 'never') return rule === 'always';
  if (rule.always?.includes(tool)) return true;
  return !rule.never?.includes(tool);
}

/** Anthropic's names for the fields of an `mcp_servers` entry. */
export const ANTHROPIC_MCP_FIELDS: McpFieldNames = {
  label: 'name',
  url: 'url',
  headers: 'authorization_token',
  allowedTools: 'tool_configuration.allowed_tools',
};

/** The `anthropic-beta` values of Anthropic's MCP connector. */
export const ANTHROPIC_MCP_BETAS = ['mcp-client-2025-11-20', 'mcp-client-2025-04-04'] as const;

/** Whether a Messages body names MCP servers (then McpLoopRun runs it). */
export function hasMcpServers(body: unknown): boolean {
  return isObject(body) && Array.isArray(body.mcp_servers) && body.mcp_servers.length > 0;
}

/**
 * A Messages body's `mcp_servers` as MCP tools of the loop, Anthropic's MCP connector read: each
 * `{type: "url", name, url?, authorization_token?, tool_configuration?}` (the 2025-04-04 beta), and
 * the `mcp_toolset` tools that configure them (the 2025-11-20 beta: `default_config` and per-tool
 * `configs`, `enabled` each). A `url` that is the registered server's own, or none, names the server
 * the config registers as `name`; the token is sent as `authorization: Bearer …`. Anthropic's connector
 * asks no approval: every call runs. Every other tool stays as it was.
 */
export function anthropicMcpServersOf(body: unknown, registeredUrl: (label: string) => string | null): McpTools {
  if (!isObject(body) || !Array.isArray(body.mcp_servers)) return { servers: [], others: [] };
  const tools = Array.isArray(body.tools) ? (body.tools as unknown[]) : [];
  const toolsets = new Map<string, { param: string; set: Record<string, unknown> }>();
  const others: unknown[] = [];
  tools.forEach((tool, i) => {
    if (!isObject(tool) || tool.type !== 'mcp_toolset') {
      others.push(tool);
      return;
    }
    const name = tool.mcp_server_name;
    const param = `tools[${i}]`;
    if (typeof name !== 'string') invalid(`${param}.mcp_server_name`, 'must name an entry of mcp_servers');
    if (toolsets.has(name)) invalid(`${param}.mcp_server_name`, `'${name}' has another mcp_toolset of this request`);
    toolsets.set(name, { param, set: tool });
  });
  const servers = body.mcp_servers.map((entry: unknown, i: number): McpToolRequest => {
    const param = `mcp_servers[${i}]`;
    if (!isObject(entry)) invalid(param, 'must be an object');
    if (entry.type !== undefined && entry.type !== 'url') invalid(`${param}.type`, "must be 'url'");
    const label = entry.name;
    if (typeof label !== 'string' || !MCP_SERVER_LABEL.test(label))
      invalid(`${param}.name`, 'must be 1-64 letters, digits, _ or -');
    const token = entry.authorization_token;
    if (token !== undefined && token !== null && typeof token !== 'string')
      invalid(`${param}.authorization_token`, 'must be a string');
    const configuration = entry.tool_configuration;
    if (configuration !== undefined && configuration !== null && !isObject(configuration))
      invalid(`${param}.tool_configuration`, 'must be an object');
    const toolset = toolsets.get(label);
    toolsets.delete(label);
    const { allowed, denied } = toolsetFilter(toolset, configuration ?? undefined, param);
    const url =
      entry.url === undefined || entry.url === null || entry.url === registeredUrl(label) ? undefined : entry.url;
    return {
      param,
      serverLabel: label,
      spec: {
        server_label: label,
        ...(url !== undefined && { server_url: url }),
        ...(typeof token === 'string' && token !== '' && { headers: { authorization: `Bearer ${token}` } }),
        ...(allowed !== undefined && { allowed_tools: allowed }),
      },
      approval: 'never',
      fields: ANTHROPIC_MCP_FIELDS,
      ...(denied.size > 0 && { denied }),
    };
  });
  const stray = [...toolsets.values()][0];
  if (stray) invalid(`${stray.param}.mcp_server_name`, 'names no entry of mcp_servers');
  const labels = new Set<string>();
  for (const server of servers) {
    if (labels.has(server.serverLabel))
      invalid(`${server.param}.name`, `'${server.serverLabel}' is the name of another entry of mcp_servers`);
    labels.add(server.serverLabel);
  }
  return { servers, others };
}

/**
 * Which tools of a server an Anthropic request offers: `tool_configuration` (`enabled`, `allowed_tools`)
 * and its `mcp_toolset` (`default_config.enabled`, `configs.<tool>.enabled`). `allowed` undefined: all.
 */
function toolsetFilter(
  toolset: { param: string; set: Record<string, unknown> } | undefined,
  configuration: Record<string, unknown> | undefined,
  server: string,
): { allowed?: string[]; denied: Set<string> } {
  const enabled = (value: unknown, param: string): boolean | undefined => {
    if (value === undefined || value === null) return undefined;
    if (typeof value !== 'boolean') invalid(param, 'must be true or false');
    return value;
  };
  let allowed: string[] | undefined;
  const list = configuration?.allowed_tools;
  if (list !== undefined && list !== null) {
    if (!Array.isArray(list) || list.some((name) => typeof name !== 'string'))
      invalid(`${server}.tool_configuration.allowed_tools`, 'must be a list of tool names');
    allowed = list as string[];
  }
  if (enabled(configuration?.enabled, `${server}.tool_configuration.enabled`) === false) allowed = [];
  const denied = new Set<string>();
  if (!toolset) return { ...(allowed !== undefined && { allowed }), denied };
  const { param, set } = toolset;
  const defaults = set.default_config;
  if (defaults !== undefined && defaults !== null && !isObject(defaults))
    invalid(`${param}.default_config`, 'must be an object');
  const byDefault =
    enabled(isObject(defaults) ? defaults.enabled : undefined, `${param}.default_config.enabled`) ?? true;
  const configs = set.configs ?? {};
  if (!isObject(configs)) invalid(`${param}.configs`, 'must be an object of tool names to {enabled}');
  const on: string[] = [];
  for (const [name, config] of Object.entries(configs)) {
    if (!isObject(config)) invalid(`${param}.configs.${name}`, 'must be an object');
    const state = enabled(config.enabled, `${param}.configs.${name}.enabled`) ?? byDefault;
    if (state) on.push(name);
    else denied.add(name);
  }
  if (!byDefault) allowed = allowed === undefined ? on : allowed.filter((name) => on.includes(name));
  return { ...(allowed !== undefined && { allowed }), denied };
}

function invalid(param: string, message: string): never {
  throw new CortexError('invalid_request', `${param}: ${message}`, { param });
}
