import type { Dialect, McpToolListing, StreamEventBody } from '@cortex/contracts';
import { anthropicMcpServersOf, mcpToolsOf, type McpTools } from './mcp-request.js';

/** A call that ran (or was declined) before the first turn, answering an approval request. */
export interface Approval {
  /** The `mcp_approval_response` item it takes the place of. */
  readonly item: unknown;
  readonly call: Omit<Extract<StreamEventBody, { type: 'mcp_call' }>, 'type' | 'phase'>;
}

/**
 * What of an MCP loop is its dialect's: where a body names its servers, how the servers' tools are
 * offered to the model as the dialect's own functions, and whether approvals are asked for.
 */
export interface McpDialect {
  readonly dialect: Dialect;
  /** Whether a call may wait for the client's approval (Responses' `require_approval`). */
  readonly approvals: boolean;
  /** The body's MCP servers, and its other tools as they were. */
  tools(body: unknown): McpTools;
  /** The body the model's turns decode: the servers' tools as functions beside `others`, approvals' results in its input. */
  body(
    record: Record<string, unknown>,
    others: readonly unknown[],
    tools: readonly McpToolListing[],
    approvals: readonly Approval[],
  ): Record<string, unknown>;
}

/** OpenAI Responses: `mcp` tools, offered as `function` tools; approvals answered by `mcp_approval_response` items. */
export const RESPONSES_MCP: McpDialect = {
  dialect: 'openai.responses',
  approvals: true,
  tools: (body) => mcpToolsOf(body) ?? { servers: [], others: [] },
  body: (record, others, tools, approvals) => ({
    ...record,
    input: approvedInput(record.input, approvals),
    tools: [
      ...others,
      ...tools.map((tool) => ({
        type: 'function',
        name: tool.name,
        ...(tool.description !== undefined && { description: tool.description }),
        parameters: tool.inputSchema,
      })),
    ],
  }),
};

/** Anthropic Messages: `mcp_servers` (and `mcp_toolset` tools), offered as client tools; no approvals. */
export function anthropicMcp(registeredUrl: (label: string) => string | null): McpDialect {
  return {
    dialect: 'anthropic.messages',
    approvals: false,
    tools: (body) => anthropicMcpServersOf(body, registeredUrl),
    body: (record, others, tools) => {
      const { mcp_servers: _servers, ...rest } = record;
      return {
        ...rest,
        tools: [
          ...others,
          ...tools.map((tool) => ({
            name: tool.name,
            ...(tool.description !== undefined && { description: tool.description }),
            input_schema: tool.inputSchema,
          })),
        ],
      };
    },
  };
}

/** The body's input with each approval response replaced by the call it let run (or was declined), for the model to read. */
function approvedInput(input: unknown, approvals: readonly Approval[]): unknown {
  if (approvals.length === 0 || !Array.isArray(input)) return input;
  return input.map((item: unknown) => {
    const answered = approvals.find((approval) => approval.item === item);
    if (!answered) return item;
    const { call } = answered;
    return {
      type: 'mcp_call',
      id: call.id,
      server_label: call.serverLabel,
      name: call.name,
      arguments: call.arguments,
      output: call.output ?? null,
      error: call.error ?? null,
      approval_request_id: call.approvalRequestId,
    };
  });
}
