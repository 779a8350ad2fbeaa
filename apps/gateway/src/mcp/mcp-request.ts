import { CortexError, isObject, MCP_SERVER_LABEL } from '@cortex/contracts';

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

function invalid(param: string, message: string): never {
  throw new CortexError('invalid_request', `${param}: ${message}`, { param });
}
