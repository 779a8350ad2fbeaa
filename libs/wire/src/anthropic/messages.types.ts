/**
 * The Anthropic Messages wire shapes cortex produces (a subset of `@anthropic-ai/sdk`'s types, written
 * out here because the SDK is a dev dependency only).
 */

export type AnthropicStopReason = 'end_turn' | 'max_tokens' | 'stop_sequence' | 'tool_use';

export type AnthropicErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'permission_error'
  | 'not_found_error'
  | 'request_too_large'
  | 'rate_limit_error'
  | 'timeout_error'
  | 'api_error'
  | 'overloaded_error';

export interface AnthropicErrorBody {
  type: 'error';
  error: { type: AnthropicErrorType; message: string };
}

export interface AnthropicTextBlock {
  type: 'text';
  text: string;
}

export interface AnthropicThinkingBlock {
  type: 'thinking';
  thinking: string;
  signature: string;
}

export interface AnthropicToolUseBlock {
  type: 'tool_use';
  id: string;
  name: string;
  input: Record<string, unknown>;
}

/** A call of a tool of an MCP server the gateway ran itself (Anthropic's MCP connector). */
export interface AnthropicMcpToolUseBlock {
  type: 'mcp_tool_use';
  id: string;
  name: string;
  server_name: string;
  input: Record<string, unknown>;
}

/** The result of an `mcp_tool_use`, as the server gave it. */
export interface AnthropicMcpToolResultBlock {
  type: 'mcp_tool_result';
  tool_use_id: string;
  is_error: boolean;
  content: AnthropicTextBlock[];
}

export type AnthropicContentBlock =
  | AnthropicTextBlock
  | AnthropicThinkingBlock
  | AnthropicToolUseBlock
  | AnthropicMcpToolUseBlock
  | AnthropicMcpToolResultBlock;

export type AnthropicDelta =
  | { type: 'text_delta'; text: string }
  | { type: 'thinking_delta'; thinking: string }
  | { type: 'signature_delta'; signature: string }
  | { type: 'input_json_delta'; partial_json: string };

export interface AnthropicUsage {
  /** Prompt tokens not read from the cache (Anthropic counts cached tokens separately). */
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
}

/** The non-streaming response body, and the `message` of `message_start`. */
export interface AnthropicMessage {
  id: string;
  type: 'message';
  role: 'assistant';
  model: string;
  content: AnthropicContentBlock[];
  stop_reason: AnthropicStopReason | null;
  stop_sequence: string | null;
  /** Only set for refusals, which a local model does not report. */
  stop_details: null;
  usage: AnthropicUsage;
}

/** The `data` of one SSE frame; its `type` is also the frame's `event:` name. */
export type AnthropicStreamEvent =
  | { type: 'message_start'; message: AnthropicMessage }
  | { type: 'content_block_start'; index: number; content_block: AnthropicContentBlock }
  | { type: 'content_block_delta'; index: number; delta: AnthropicDelta }
  | { type: 'content_block_stop'; index: number }
  | {
      type: 'message_delta';
      delta: { stop_reason: AnthropicStopReason; stop_sequence: string | null; stop_details: null };
      usage: AnthropicUsage;
    }
  | { type: 'message_stop' }
  | { type: 'ping' }
  | AnthropicErrorBody;

/** One SSE frame: write it as `event: <event>\ndata: <JSON of data>\n\n` (see `sseFrame`). */
export interface AnthropicFrame {
  event: AnthropicStreamEvent['type'];
  data: AnthropicStreamEvent;
}
