/**
 * The OpenResponses / OpenAI Responses wire shapes cortex reads and writes: items, the response resource
 * and the streaming events. Field names are the wire's (snake_case) so items can be stored and served back
 * as they are. Schema names in comments refer to `components.schemas` of the OpenResponses OpenAPI document.
 */

export type ResponsesItemStatus = 'in_progress' | 'completed' | 'incomplete';
export type ResponsesMessageRole = 'user' | 'assistant' | 'system' | 'developer';

export interface ResponsesInputTextPart {
  type: 'input_text';
  text: string;
}

/** `InputImageContent`: a fully qualified URL or a base64 data URL; `detail` defaults to `auto`. */
export interface ResponsesInputImagePart {
  type: 'input_image';
  image_url: string;
  detail: 'auto' | 'low' | 'high';
}

/** `OutputTextContent`: `annotations` is required by the schema; cortex never annotates. */
export interface ResponsesOutputTextPart {
  type: 'output_text';
  text: string;
  annotations: unknown[];
  logprobs?: unknown[];
}

export interface ResponsesReasoningTextPart {
  type: 'reasoning_text';
  text: string;
}

export interface ResponsesSummaryTextPart {
  type: 'summary_text';
  text: string;
}

/** `Message`: user/system/developer content is `input_text`, assistant content `output_text`. */
export interface ResponsesMessageItem {
  type: 'message';
  id?: string;
  status?: ResponsesItemStatus;
  role: ResponsesMessageRole;
  content: Array<ResponsesInputTextPart | ResponsesInputImagePart | ResponsesOutputTextPart>;
}

/** `FunctionCall`: `call_id` is the id a `function_call_output` answers; `id` is the item's own id. */
export interface ResponsesFunctionCallItem {
  type: 'function_call';
  id?: string;
  call_id: string;
  name: string;
  /** JSON text, as the model wrote it. */
  arguments: string;
  /** The `namespace` tool the function was offered in: clients dispatch namespaced calls by it. */
  namespace?: string;
  status?: ResponsesItemStatus;
}

/** `FunctionCallOutput`: text, or text and image parts (a tool that read an image file answers with it). */
export interface ResponsesFunctionCallOutputItem {
  type: 'function_call_output';
  id?: string;
  call_id: string;
  output: string | Array<ResponsesInputTextPart | ResponsesInputImagePart>;
  status?: ResponsesItemStatus;
}

/**
 * `ReasoningBody`. Cortex writes the model's reasoning as `reasoning_text` content with an empty `summary`,
 * or, when the request asks for a summary (`reasoning.summary`), as one `summary_text` part and no content.
 */
export interface ResponsesReasoningItem {
  type: 'reasoning';
  id?: string;
  summary: ResponsesSummaryTextPart[];
  content?: ResponsesReasoningTextPart[];
  /** Opaque reasoning from another provider: kept for storage, never readable here. */
  encrypted_content?: string;
  status?: ResponsesItemStatus;
}

/**
 * `CompactionSummaryItemParam` / `CompactionBody`: the model's summary of the conversation before it, made by
 * `POST /v1/responses/compact`. `encrypted_content` is sealed (`CompactionSeal`); `summary` is the text once
 * opened here, for rendering only.
 */
export interface ResponsesCompactionItem {
  type: 'compaction';
  id?: string;
  encrypted_content: string;
  created_by?: string;
  summary?: string;
}

/** `McpListTools`: the tools a remote MCP server offered, listed by the gateway for the model. */
export interface ResponsesMcpListToolsItem {
  type: 'mcp_list_tools';
  id?: string;
  server_label: string;
  tools: Array<{
    name: string;
    description?: string | null;
    input_schema: Record<string, unknown>;
    annotations?: unknown;
  }>;
  error?: string | null;
}

/** `McpCall`: a call the model made to an MCP server's tool, run by the gateway, with its output or error. */
export interface ResponsesMcpCallItem {
  type: 'mcp_call';
  id?: string;
  server_label: string;
  name: string;
  /** JSON text, as the model wrote it. */
  arguments: string;
  output?: string | null;
  error?: string | null;
  status?: 'in_progress' | 'calling' | 'completed' | 'failed' | 'incomplete';
  approval_request_id?: string | null;
}

/** `McpApprovalRequest`: a call of an MCP tool that waits for the client's approval. */
export interface ResponsesMcpApprovalRequestItem {
  type: 'mcp_approval_request';
  id?: string;
  server_label: string;
  name: string;
  arguments: string;
}

/** `ItemReferenceParam`: an earlier item by id, resolved by the caller (see `resolveItemReferences`). */
export interface ResponsesItemReference {
  type: 'item_reference';
  id: string;
}

/**
 * A normalized conversation item: what the decoder makes of any accepted input item, and what a response's
 * output items are. Stored input items plus stored output items of a response are enough to rebuild its
 * conversation (`itemsToMessages`).
 */
export type ResponsesItem =
  | ResponsesMessageItem
  | ResponsesFunctionCallItem
  | ResponsesFunctionCallOutputItem
  | ResponsesReasoningItem
  | ResponsesCompactionItem
  | ResponsesMcpListToolsItem
  | ResponsesMcpCallItem
  | ResponsesMcpApprovalRequestItem
  | ResponsesItemReference;

/** Items a response produces (`ItemField`), each with its id and status. */
export type ResponsesOutputItem =
  | (ResponsesMessageItem & {
      id: string;
      status: ResponsesItemStatus;
      role: 'assistant';
      content: ResponsesOutputTextPart[];
    })
  | (ResponsesFunctionCallItem & { id: string; status: ResponsesItemStatus })
  | (ResponsesReasoningItem & { id: string })
  | (ResponsesMcpListToolsItem & { id: string })
  | (ResponsesMcpCallItem & { id: string; output: string | null; error: string | null })
  | (ResponsesMcpApprovalRequestItem & { id: string });

/** `FunctionTool` as echoed in the resource: every field present, nulls where the request had none. */
export interface FunctionToolEcho {
  type: 'function';
  name: string;
  description: string | null;
  parameters: Record<string, unknown> | null;
  strict: boolean | null;
}

export type ToolChoiceEcho =
  | 'none'
  | 'auto'
  | 'required'
  | { type: 'function'; name: string }
  | { type: 'allowed_tools'; mode: 'none' | 'auto' | 'required'; tools: Array<{ type: 'function'; name: string }> };

export type TextFormatEcho =
  | { type: 'text' }
  | { type: 'json_object' }
  // The schema's `JsonSchemaResponseFormat.schema` admits only null: see `decodeTextFormat`.
  | { type: 'json_schema'; name: string; description: string | null; schema: null; strict: boolean };

/**
 * The request settings a response resource repeats back, in wire form. JSON-safe, so it can travel with the
 * canonical request over the bus and be stored with the response.
 */
export interface ResponseEcho {
  model: string;
  instructions: string | null;
  previous_response_id: string | null;
  tools: FunctionToolEcho[];
  tool_choice: ToolChoiceEcho;
  truncation: 'auto' | 'disabled';
  parallel_tool_calls: boolean;
  text: { format: TextFormatEcho; verbosity: 'low' | 'medium' | 'high' };
  top_p: number;
  temperature: number;
  presence_penalty: number;
  frequency_penalty: number;
  top_logprobs: number;
  reasoning: { effort: string | null; summary: string | null };
  max_output_tokens: number | null;
  max_tool_calls: number | null;
  store: boolean;
  background: boolean;
  service_tier: string;
  metadata: Record<string, string>;
  safety_identifier: string | null;
  prompt_cache_key: string | null;
  /** OpenAI's extension (not in the OpenResponses schema): the conversation the response belongs to. */
  conversation?: { id: string };
}

/** `queued` and `cancelled` only for background responses. */
export type ResponseStatus = 'queued' | 'in_progress' | 'completed' | 'incomplete' | 'failed' | 'cancelled';

export interface ResponsesUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

/** `ResponseResource`: every field the schema requires. */
export interface ResponseResource extends ResponseEcho {
  id: string;
  object: 'response';
  created_at: number;
  completed_at: number | null;
  status: ResponseStatus;
  incomplete_details: { reason: string } | null;
  output: ResponsesOutputItem[];
  error: { code: string; message: string } | null;
  usage: ResponsesUsage | null;
}

/** The non-streaming body: the resource plus OpenAI's `output_text` convenience (all output text, joined). */
export type ResponseBody = ResponseResource & { output_text: string };

/** `ErrorPayload` of the spec's `error` event. */
export interface ResponsesErrorPayload {
  type: string;
  code: string | null;
  message: string;
  param: string | null;
}

type Seq = { sequence_number: number };
type ContentRef = { item_id: string; output_index: number; content_index: number };
type SummaryRef = { item_id: string; output_index: number; summary_index: number };

/**
 * Reasoning text events. Which family a stream uses is the encoder's `reasoningEvents` option:
 * - 'openai': `response.reasoning_text.delta|done`, the names the official `openai` client accumulates
 *   (it throws "Unhandled response stream event" on names outside its list, the spec's included);
 * - 'openresponses': `response.reasoning.delta|done`, the spec's `ResponseReasoning{Delta,Done}StreamingEvent`.
 */
export type ResponsesReasoningEventType = 'response.reasoning_text.delta' | 'response.reasoning.delta';
export type ResponsesReasoningDoneEventType = 'response.reasoning_text.done' | 'response.reasoning.done';

/** The `data` of one SSE frame; `type` is also the frame's `event:` name. */
export type ResponsesStreamEvent =
  | ({
      type:
        'response.created' | 'response.in_progress' | 'response.completed' | 'response.incomplete' | 'response.failed';
      response: ResponseResource;
    } & Seq)
  | ({
      type: 'response.output_item.added' | 'response.output_item.done';
      output_index: number;
      item: ResponsesOutputItem;
    } & Seq)
  | ({
      type: 'response.content_part.added' | 'response.content_part.done';
      part: ResponsesOutputTextPart | ResponsesReasoningTextPart;
    } & ContentRef &
      Seq)
  | ({ type: 'response.output_text.delta'; delta: string; logprobs: unknown[] } & ContentRef & Seq)
  | ({ type: 'response.output_text.done'; text: string; logprobs: unknown[] } & ContentRef & Seq)
  | ({ type: ResponsesReasoningEventType; delta: string } & ContentRef & Seq)
  | ({ type: ResponsesReasoningDoneEventType; text: string } & ContentRef & Seq)
  // Reasoning summaries: the same names in the spec and at OpenAI.
  | ({
      type: 'response.reasoning_summary_part.added' | 'response.reasoning_summary_part.done';
      part: ResponsesSummaryTextPart;
    } & SummaryRef &
      Seq)
  | ({ type: 'response.reasoning_summary_text.delta'; delta: string } & SummaryRef & Seq)
  | ({ type: 'response.reasoning_summary_text.done'; text: string } & SummaryRef & Seq)
  | ({ type: 'response.function_call_arguments.delta'; item_id: string; output_index: number; delta: string } & Seq)
  | ({ type: 'response.function_call_arguments.done'; item_id: string; output_index: number; arguments: string } & Seq)
  | ({
      type:
        | 'response.mcp_list_tools.in_progress'
        | 'response.mcp_list_tools.completed'
        | 'response.mcp_list_tools.failed'
        | 'response.mcp_call.in_progress'
        | 'response.mcp_call.completed'
        | 'response.mcp_call.failed';
      item_id: string;
      output_index: number;
    } & Seq)
  | ({ type: 'response.mcp_call_arguments.delta'; item_id: string; output_index: number; delta: string } & Seq)
  | ({ type: 'response.mcp_call_arguments.done'; item_id: string; output_index: number; arguments: string } & Seq)
  // Both error shapes at once: OpenAI documents `code/message/param` at the top, the spec's `ErrorStreamingEvent`
  // requires them under `error` (and the openai client throws an APIError built from `data.error`).
  | ({ type: 'error'; code: string | null; message: string; param: string | null; error: ResponsesErrorPayload } & Seq);

export type ResponsesStreamEventType = ResponsesStreamEvent['type'];

/** One SSE frame: write it as `event: <event>\ndata: <JSON of data>\n\n` (see `sseFrame`), then `data: [DONE]`. */
export interface ResponsesFrame {
  event: ResponsesStreamEventType;
  data: ResponsesStreamEvent;
}
