import { templateOptions } from '../template-options.js';
import { cacheControlKeepsLonger, sessionFromAnthropicUserId } from '../affinity.js';
import { unrunnableTool, type DecodeOptions } from '../hosted-tools.js';
import { anthropicImage, ContentParts, rejectMedia } from '../media.js';
import { ToolCallLedger } from '../tool-results.js';
import {
  array,
  defined,
  fail,
  isObject,
  jsonSchema,
  modelName,
  object,
  oneOf,
  optionalArray,
  optionalBoolean,
  optionalInteger,
  optionalNumber,
  optionalObject,
  optionalString,
  stopSequences,
  string,
  type CanonicalMessage,
  type CanonicalRequest,
  type Json,
  type ResponseFormat,
  type Sampling,
  type ToolCall,
  type ToolDefinition,
} from '@cortex/contracts';

/** A decoded Anthropic request: the canonical request plus what the canonical shape has no field for. */
export interface DecodedMessagesRequest {
  request: CanonicalRequest;
  /**
   * The client asked for extended thinking. Only then do responses carry `thinking` blocks: a client
   * that did not ask must not receive block types it may not handle.
   */
  thinking: boolean;
  /** Server tools left out under `hostedTools: drop`, each as `tools[i] (type)`, for the log. */
  droppedTools: string[];
}

// Anthropic sends multiple text blocks as separate blocks; the canonical message is one string, and
// gluing `<system-reminder>…</system-reminder>` to the next sentence would merge unrelated text.
const BLOCK_SEPARATOR = '\n';

/**
 * Anthropic Messages (`POST /v1/messages`) body → canonical request.
 * Throws `invalid_request` naming the field path in `param`.
 */
export function decodeMessagesRequest(input: unknown, options: DecodeOptions = {}): DecodedMessagesRequest {
  const body = object(input, 'body');
  const model = modelName(body.model);
  // Unlike OpenAI, Anthropic requires max_tokens.
  const maxTokens = optionalInteger(body.max_tokens, 'max_tokens', 1);
  if (maxTokens === undefined) fail('max_tokens', 'is required');

  const messages: CanonicalMessage[] = [];
  const system = decodeSystem(body.system);
  if (system) messages.push({ role: 'system', content: system });
  const turns = array(body.messages, 'messages');
  if (turns.length === 0) fail('messages', 'must contain at least one message');
  // Each tool_result answers a tool_use of an earlier assistant turn.
  const ledger = new ToolCallLedger();
  turns.forEach((turn, i) => messages.push(...decodeTurn(turn, `messages[${i}]`, model, ledger)));
  if (messages.every((message) => message.role === 'system'))
    fail('messages', 'must contain a user or assistant turn, not only system turns');
  // A last assistant turn of text is a prefill, as at Anthropic: the answer goes on from it.
  const last = messages.at(-1);
  const prefill =
    last?.role === 'assistant' && !last.toolCalls?.length && !last.reasoning && last.content ? last.content : undefined;
  if (prefill !== undefined) messages.pop();

  const droppedTools: string[] = [];
  let tools = optionalArray(body.tools, 'tools')?.flatMap((t, i) => {
    const param = `tools[${i}]`;
    const tool = object(t, param);
    // Server tools (web_search_…, code_execution_…) run at Anthropic, and the Anthropic-defined client
    // tools (bash_…, text_editor_…, computer_…) have schemas only Anthropic's models know: none of them
    // is a tool a local model can be offered.
    if (tool.type !== undefined && tool.type !== null && tool.type !== 'custom') {
      droppedTools.push(unrunnableTool(options, param, `server tool ${JSON.stringify(tool.type)}`));
      return [];
    }
    return [decodeTool(tool, param)];
  });
  const toolChoice = decodeToolChoice(body.tool_choice, tools);
  if (toolChoice === 'none') tools = undefined;

  const metadata = optionalObject(body.metadata, 'metadata');
  if (metadata?.user_id !== undefined && metadata.user_id !== null) string(metadata.user_id, 'metadata.user_id');
  const session = sessionFromAnthropicUserId(metadata?.user_id);
  const thinking = decodeThinking(body.thinking);

  const request: CanonicalRequest = {
    model,
    messages,
    sampling: decodeSampling(body, maxTokens),
    stream: optionalBoolean(body.stream, 'stream') ?? false,
  };
  if (tools && tools.length > 0) request.tools = tools;
  if (toolChoice && toolChoice !== 'none') request.toolChoice = toolChoice;
  if (prefill !== undefined) request.prefill = prefill;
  if (
    isObject(body.tool_choice) &&
    optionalBoolean(body.tool_choice.disable_parallel_tool_use, 'tool_choice.disable_parallel_tool_use')
  )
    request.maxToolCalls = 1;
  const format = decodeOutputConfig(body.output_config) ?? decodeJsonFormat(body.output_format, 'output_format');
  if (format) request.responseFormat = format;
  if (session) request.affinityKey = session;
  if (cacheControlKeepsLonger(body)) request.keepPromptLonger = true;
  // Thinking turned off, and an effort, reach the model's chat template (Qwen3's enable_thinking, gpt-oss's reasoning_effort).
  const effort = isObject(body.output_config)
    ? optionalString(body.output_config.effort, 'output_config.effort')
    : undefined;
  const disabled = isObject(body.thinking) && body.thinking.type === 'disabled';
  const forTemplate = templateOptions(undefined, 'thinking', {
    ...(disabled && { enable_thinking: false }),
    ...(effort && {
      reasoning_effort:
        effort === 'max' ? 'high' : oneOf(effort, 'output_config.effort', ['low', 'medium', 'high'] as const),
    }),
  });
  if (forTemplate) request.templateOptions = forTemplate;
  return { request, thinking, droppedTools };
}

function decodeSystem(value: unknown): string | undefined {
  if (value === undefined || value === null) return undefined;
  return systemText(value, 'system') || undefined;
}

/** A system prompt's text: a string, or text blocks (with `cache_control` and the like ignored). */
function systemText(value: unknown, param: string): string {
  if (typeof value === 'string') return value;
  return array(value, param)
    .map((block, i) => textBlock(block, `${param}[${i}]`))
    .join(BLOCK_SEPARATOR);
}

/** One Anthropic turn → one or more canonical messages (tool results become `tool` messages). */
function decodeTurn(input: unknown, param: string, model: string, ledger: ToolCallLedger): CanonicalMessage[] {
  const turn = object(input, param);
  // A system turn mid-conversation (Claude Code sends one after the first user turn) stays where it
  // stands: the canonical conversation keeps system messages in order and the chat template renders them.
  const role = oneOf(turn.role, `${param}.role`, ['user', 'assistant', 'system'] as const);
  const content = turn.content;
  if (role === 'system') return [{ role, content: systemText(content, `${param}.content`) }];
  if (typeof content === 'string') return [{ role, content }];
  const blocks = array(content, `${param}.content`).map((block, i) => {
    const path = `${param}.content[${i}]`;
    const b = object(block, path);
    return { block: b, path, type: string(b.type, `${path}.type`) };
  });
  if (role === 'user') return decodeUserBlocks(blocks, model, ledger);
  const messages = decodeAssistantBlocks(blocks, model);
  // An MCP call the gateway ran is answered in the same turn; the client's own wait for a tool_result.
  for (const message of messages)
    for (const call of message.toolCalls ?? []) if (!message.mcpAnswered) ledger.called(call.id);
  return messages.map(({ mcpAnswered: _answered, ...message }) => message);
}

interface Block {
  block: Json;
  path: string;
  type: string;
}

function decodeUserBlocks(blocks: Block[], model: string, ledger: ToolCallLedger): CanonicalMessage[] {
  const results: CanonicalMessage[] = [];
  const parts = new ContentParts(BLOCK_SEPARATOR);
  let said = false;
  for (const { block, path, type } of blocks) {
    if (type === 'text') parts.addText(string(block.text, `${path}.text`));
    else if (type === 'image') parts.addImage(anthropicImage(block, path));
    else if (type === 'tool_result') {
      const result = decodeToolResult(block, path, model);
      ledger.answered(result.toolCallId ?? '', `${path}.tool_use_id`);
      results.push(result);
      continue;
    } else rejectBlock(type, path, 'user', model);
    said = true;
  }
  // Canonical chat templates expect the tool results right after the assistant's calls, so the
  // turn's text follows them as its own user message (Anthropic puts tool_result blocks first anyway).
  if (said || results.length === 0) results.push({ role: 'user', ...parts.message });
  return results;
}

function decodeToolResult(block: Json, path: string, model: string): CanonicalMessage {
  const toolCallId = string(block.tool_use_id, `${path}.tool_use_id`);
  const parts = new ContentParts(BLOCK_SEPARATOR);
  if (block.content === undefined || block.content === null) parts.addText('');
  else if (typeof block.content === 'string') parts.addText(block.content);
  else {
    array(block.content, `${path}.content`).forEach((part, j) => {
      const partPath = `${path}.content[${j}]`;
      const type = string(object(part, partPath).type, `${partPath}.type`);
      // Claude Code's Read tool answers an image file with an image block here.
      if (type === 'image') parts.addImage(anthropicImage(part as Json, partPath));
      else if (type === 'text') parts.addText(textBlock(part, partPath));
      else rejectBlock(type, partPath, 'tool_result', model);
    });
  }
  const { content, images } = parts.message;
  const error = optionalBoolean(block.is_error, `${path}.is_error`);
  // The prefix moves the images along with the text they stand in.
  const prefix = error ? 'Error: ' : '';
  return {
    role: 'tool',
    content: `${prefix}${content}`,
    ...(images && { images: images.map((image) => ({ ...image, at: image.at + prefix.length })) }),
    toolCallId,
  };
}

/**
 * An assistant turn's blocks: one message, or, where the turn holds MCP calls the gateway ran
 * (`mcp_tool_use` then its `mcp_tool_result`, Anthropic's connector), the message up to each result,
 * the result as a tool message, and the message after it.
 */
function decodeAssistantBlocks(blocks: Block[], model: string): Array<CanonicalMessage & { mcpAnswered?: true }> {
  const messages: Array<CanonicalMessage & { mcpAnswered?: true }> = [];
  let texts: string[] = [];
  let reasoning: string[] = [];
  let toolCalls: ToolCall[] = [];
  let mcpCalls = 0;
  const mcpIds = new Set<string>();
  const flush = (): void => {
    const message: CanonicalMessage & { mcpAnswered?: true } = {
      role: 'assistant',
      content: texts.join(BLOCK_SEPARATOR),
    };
    if (reasoning.length > 0) message.reasoning = reasoning.join(BLOCK_SEPARATOR);
    if (toolCalls.length > 0) message.toolCalls = toolCalls;
    if (mcpCalls > 0) message.mcpAnswered = true;
    messages.push(message);
    texts = [];
    reasoning = [];
    toolCalls = [];
    mcpCalls = 0;
  };
  for (const { block, path, type } of blocks) {
    if (type === 'text') texts.push(string(block.text, `${path}.text`));
    else if (type === 'thinking') reasoning.push(string(block.thinking, `${path}.thinking`));
    else if (type === 'redacted_thinking')
      continue; // encrypted by another provider: nothing a local model can read
    else if (type === 'tool_use') toolCalls.push(decodeToolUse(block, path));
    else if (type === 'mcp_tool_use') {
      if (mcpCalls < toolCalls.length)
        fail(`${path}.type`, 'an mcp_tool_use block cannot follow a tool_use block of the same turn');
      const call = decodeToolUse(block, path);
      toolCalls.push(call);
      mcpIds.add(call.id);
      mcpCalls++;
    } else if (type === 'mcp_tool_result') {
      const result = decodeToolResult(block, path, model);
      if (!mcpIds.has(result.toolCallId ?? ''))
        fail(`${path}.tool_use_id`, 'must name an mcp_tool_use block before it in the same turn');
      if (messages.at(-1)?.role !== 'tool' || texts.length > 0 || toolCalls.length > 0) flush();
      messages.push(result);
    } else rejectBlock(type, path, 'assistant', model);
  }
  if (messages.length === 0 || texts.length > 0 || reasoning.length > 0 || toolCalls.length > 0) flush();
  return messages;
}

function decodeToolUse(block: Json, path: string): ToolCall {
  return {
    id: string(block.id, `${path}.id`),
    name: string(block.name, `${path}.name`),
    arguments: JSON.stringify(object(block.input, `${path}.input`)),
  };
}

/** Blocks no engine here reads (images are read, in user turns and tool results). */
const MEDIA_BLOCKS = new Set(['document', 'search_result', 'container_upload']);

function rejectBlock(type: string, path: string, where: 'user' | 'assistant' | 'tool_result', model: string): never {
  if (MEDIA_BLOCKS.has(type)) rejectMedia(path, `${type} blocks`, model);
  if (type === 'image') fail(`${path}.type`, 'image blocks belong in user turns and tool results');
  if (type === 'tool_use' || type === 'thinking' || type === 'redacted_thinking')
    fail(`${path}.type`, `${type} blocks belong in assistant turns`);
  if (type === 'tool_result') fail(`${path}.type`, `tool_result blocks belong in user turns`);
  return fail(
    `${path}.type`,
    `unsupported content block type '${type}' in ${where === 'tool_result' ? 'a tool_result' : `a ${where} turn`}`,
  );
}

function textBlock(input: unknown, path: string): string {
  const block = object(input, path);
  oneOf(block.type, `${path}.type`, ['text']);
  return string(block.text, `${path}.text`);
}

/** A custom tool; `defer_loading`, `cache_control` and other hints for Anthropic's servers are ignored. */
function decodeTool(tool: Json, param: string): ToolDefinition {
  const name = string(tool.name, `${param}.name`);
  if (name.length === 0) fail(`${param}.name`, 'must not be empty');
  const out: ToolDefinition = { name, parameters: jsonSchema(tool.input_schema, `${param}.input_schema`) };
  const description = optionalString(tool.description, `${param}.description`);
  if (description !== undefined) out.description = description;
  if (optionalBoolean(tool.strict, `${param}.strict`)) out.strict = true;
  return out;
}

/** Anthropic tool_choice → canonical `auto | required | function:<name>`, or 'none' to drop the tools. */
function decodeToolChoice(value: unknown, tools: ToolDefinition[] | undefined): string | undefined {
  if (value === undefined || value === null) return undefined;
  const choice = object(value, 'tool_choice');
  const type = oneOf(choice.type, 'tool_choice.type', ['auto', 'any', 'tool', 'none'] as const);
  if (type === 'auto' || type === 'none') return type;
  if (type === 'any') return 'required';
  const name = string(choice.name, 'tool_choice.name');
  if (!tools?.some((tool) => tool.name === name)) fail('tool_choice.name', `no tool named '${name}' in tools`);
  return `function:${name}`;
}

function decodeThinking(value: unknown): boolean {
  if (value === undefined || value === null) return false;
  const thinking = object(value, 'thinking');
  const type = oneOf(thinking.type, 'thinking.type', ['enabled', 'disabled', 'adaptive', 'between_tools'] as const);
  // The budget cannot be enforced separately from max_tokens here; it is checked for shape only.
  if (type === 'enabled' && optionalInteger(thinking.budget_tokens, 'thinking.budget_tokens', 1) === undefined) {
    fail('thinking.budget_tokens', 'is required when thinking is enabled');
  }
  return type !== 'disabled';
}

function decodeSampling(body: Json, maxTokens: number): Sampling {
  return defined<Sampling>({
    maxTokens,
    // Anthropic's temperature range is 0..1 (OpenAI's is 0..2); the canonical scale is the same number.
    temperature: optionalNumber(body.temperature, 'temperature', 0, 1),
    topP: optionalNumber(body.top_p, 'top_p', 0, 1),
    topK: optionalInteger(body.top_k, 'top_k', 0),
    stop: stopSequences(body.stop_sequences, 'stop_sequences'),
  });
}

/**
 * Structured outputs: `output_config.format = {type: 'json_schema', schema}`. `effort` (low … max) goes
 * to the model's chat template as `reasoning_effort` (see decodeMessagesRequest).
 */
function decodeOutputConfig(value: unknown): ResponseFormat | undefined {
  if (value === undefined || value === null) return undefined;
  const config = object(value, 'output_config');
  optionalString(config.effort, 'output_config.effort');
  if (config.format === undefined || config.format === null) return undefined;
  return decodeJsonFormat(config.format, 'output_config.format');
}

/** `{type: 'json_schema', schema}`: `output_config.format`, or the beta's older top-level `output_format`. */
function decodeJsonFormat(value: unknown, param: string): ResponseFormat | undefined {
  if (value === undefined || value === null) return undefined;
  const format = object(value, param);
  oneOf(format.type, `${param}.type`, ['json_schema']);
  return { type: 'json_schema', schema: jsonSchema(format.schema, `${param}.schema`) };
}
