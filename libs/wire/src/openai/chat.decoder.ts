import { affinityKey, keepsPromptLonger } from '../affinity.js';
import { REASONING_EFFORTS, templateOptions } from '../template-options.js';
import { ContentParts, openaiImage, rejectMedia } from '../media.js';
import { ToolCallLedger } from '../tool-results.js';
import { samplingExtensions } from '../sampling-extensions.js';
import {
  array,
  defined,
  fail,
  jsonSchema,
  modelName,
  object,
  oneOf,
  optionalArray,
  optionalBoolean,
  optionalInteger,
  optionalNumber,
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

const ROLES = ['system', 'developer', 'user', 'assistant', 'tool'] as const;

/** The most choices (`n`) one chat completion may ask for, as for legacy completions. */
export const MAX_CHAT_CHOICES = 16;

/** OpenAI Chat Completions body → canonical request. Throws `invalid_request` naming the field. */
export function decodeChatRequest(input: unknown): CanonicalRequest {
  const body = object(input, 'body');
  const model = modelName(body.model);
  const messages = array(body.messages, 'messages').map((m, i) => decodeMessage(m, `messages[${i}]`, model));
  if (messages.length === 0) fail('messages', 'must contain at least one message');
  checkToolResults(messages);
  // The gateway runs n > 1 as that many requests of n = 1 (see MAX_CHAT_CHOICES).
  const n = optionalInteger(body.n, 'n', 1, MAX_CHAT_CHOICES);
  if (n !== undefined && n !== 1)
    fail('n', `one choice per request here; the gateway splits n from 2 to ${MAX_CHAT_CHOICES}`);

  let tools = optionalArray(body.tools, 'tools')?.map((t, i) => decodeTool(t, `tools[${i}]`));
  const toolChoice = decodeToolChoice(body.tool_choice, tools);
  if (toolChoice === 'none') tools = undefined;

  const request: CanonicalRequest = {
    model,
    messages,
    sampling: decodeSampling(body),
    stream: optionalBoolean(body.stream, 'stream') ?? false,
  };
  if (tools && tools.length > 0) request.tools = tools;
  if (toolChoice && toolChoice !== 'none') request.toolChoice = toolChoice;
  if (optionalBoolean(body.parallel_tool_calls, 'parallel_tool_calls') === false) request.maxToolCalls = 1;
  const format = decodeResponseFormat(body.response_format);
  if (format) request.responseFormat = format;
  const logprobs = optionalBoolean(body.logprobs, 'logprobs');
  const top = optionalInteger(body.top_logprobs, 'top_logprobs', 0, 20);
  if (top !== undefined && !logprobs) fail('top_logprobs', 'needs logprobs: true');
  if (logprobs) request.logprobs = top ?? 0;
  if (body.stream_options !== undefined && body.stream_options !== null) {
    const options = object(body.stream_options, 'stream_options');
    if (!request.stream) fail('stream_options', 'is only allowed when stream is true');
    request.includeUsage = optionalBoolean(options.include_usage, 'stream_options.include_usage') ?? false;
  }
  const cacheKey = optionalString(body.prompt_cache_key, 'prompt_cache_key');
  if (cacheKey) request.affinityKey = affinityKey.promptCacheKey(cacheKey);
  if (keepsPromptLonger(body.prompt_cache_retention)) request.keepPromptLonger = true;
  // What the model's chat template reads (vLLM's and llama.cpp's servers take chat_template_kwargs too).
  const options = templateOptions(body.chat_template_kwargs, 'chat_template_kwargs', {
    ...(body.reasoning_effort !== undefined &&
      body.reasoning_effort !== null && {
        reasoning_effort: oneOf(body.reasoning_effort, 'reasoning_effort', REASONING_EFFORTS),
      }),
  });
  if (options) request.templateOptions = options;
  const prefill = decodeContinue(body, messages);
  if (prefill !== undefined) {
    messages.pop();
    request.prefill = prefill;
  }
  return request;
}

/**
 * vLLM's `continue_final_message` (with `add_generation_prompt: false`, which vLLM requires beside
 * it): the last message, an assistant's text, is the start of the answer, which goes on from it.
 */
function decodeContinue(body: Record<string, unknown>, messages: readonly CanonicalMessage[]): string | undefined {
  const generationPrompt = optionalBoolean(body.add_generation_prompt, 'add_generation_prompt');
  if (!optionalBoolean(body.continue_final_message, 'continue_final_message')) return undefined;
  if (generationPrompt === true)
    fail(
      'add_generation_prompt',
      'cannot be true with continue_final_message: the answer goes on from the last message',
    );
  const last = messages.at(-1);
  if (last?.role !== 'assistant' || last.toolCalls?.length || last.images?.length)
    fail('continue_final_message', "needs the last message to be the assistant's text, which the answer goes on from");
  return last.content;
}

/** Each `tool` message answers a call an earlier assistant message made. */
function checkToolResults(messages: readonly CanonicalMessage[]): void {
  const ledger = new ToolCallLedger();
  messages.forEach((message, i) => {
    for (const call of message.toolCalls ?? []) ledger.called(call.id);
    if (message.toolCallId !== undefined) ledger.answered(message.toolCallId, `messages[${i}].tool_call_id`);
  });
}

function decodeMessage(input: unknown, param: string, model: string): CanonicalMessage {
  const message = object(input, param);
  const role = oneOf(message.role, `${param}.role`, ROLES);
  const content = decodeContent(message.content, `${param}.content`, role === 'assistant', model);
  const out: CanonicalMessage = { role: role === 'developer' ? 'system' : role, ...content };
  const name = optionalString(message.name, `${param}.name`);
  if (name) out.name = name;
  if (role === 'assistant') {
    const reasoning = optionalString(message.reasoning_content, `${param}.reasoning_content`);
    if (reasoning) out.reasoning = reasoning;
    if (message.tool_calls !== undefined && message.tool_calls !== null) {
      out.toolCalls = array(message.tool_calls, `${param}.tool_calls`).map((c, i) =>
        decodeToolCall(c, `${param}.tool_calls[${i}]`),
      );
    }
  }
  if (role === 'tool') out.toolCallId = string(message.tool_call_id, `${param}.tool_call_id`);
  return out;
}

function decodeContent(
  value: unknown,
  param: string,
  nullable: boolean,
  model: string,
): Pick<CanonicalMessage, 'content' | 'images'> {
  if (typeof value === 'string') return { content: value };
  if ((value === null || value === undefined) && nullable) return { content: '' };
  if (!Array.isArray(value)) fail(param, 'must be a string or an array of content parts');
  const parts = new ContentParts();
  value.forEach((part, i) => {
    const p = object(part, `${param}[${i}]`);
    const type = string(p.type, `${param}[${i}].type`);
    if (type === 'text') parts.addText(string(p.text, `${param}[${i}].text`));
    else if (type === 'image_url') parts.addImage(openaiImage(p, `${param}[${i}]`));
    else if (type === 'input_audio' || type === 'file') rejectMedia(`${param}[${i}]`, `${type} parts`, model);
    else fail(`${param}[${i}].type`, `unknown content part type '${type}'`);
  });
  return parts.message;
}

function decodeToolCall(input: unknown, param: string): ToolCall {
  const call = object(input, param);
  const fn = object(call.function, `${param}.function`);
  return {
    id: string(call.id, `${param}.id`),
    name: string(fn.name, `${param}.function.name`),
    arguments: string(fn.arguments, `${param}.function.arguments`),
  };
}

function decodeTool(input: unknown, param: string): ToolDefinition {
  const tool = object(input, param);
  oneOf(tool.type, `${param}.type`, ['function']);
  const fn = object(tool.function, `${param}.function`);
  const out: ToolDefinition = { name: string(fn.name, `${param}.function.name`) };
  const description = optionalString(fn.description, `${param}.function.description`);
  if (description !== undefined) out.description = description;
  if (fn.parameters !== undefined) out.parameters = jsonSchema(fn.parameters, `${param}.function.parameters`);
  if (optionalBoolean(fn.strict, `${param}.function.strict`)) out.strict = true;
  return out;
}

function decodeToolChoice(value: unknown, tools: ToolDefinition[] | undefined): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value === 'string') return oneOf(value, 'tool_choice', ['none', 'auto', 'required']);
  const choice = object(value, 'tool_choice');
  oneOf(choice.type, 'tool_choice.type', ['function']);
  const name = string(object(choice.function, 'tool_choice.function').name, 'tool_choice.function.name');
  if (!tools?.some((tool) => tool.name === name)) fail('tool_choice.function.name', `no tool named '${name}' in tools`);
  return `function:${name}`;
}

function decodeSampling(body: Json): Sampling {
  return defined<Sampling>({
    temperature: optionalNumber(body.temperature, 'temperature', 0, 2),
    topP: optionalNumber(body.top_p, 'top_p', 0, 1),
    seed: optionalInteger(body.seed, 'seed', Number.MIN_SAFE_INTEGER),
    maxTokens:
      optionalInteger(body.max_completion_tokens, 'max_completion_tokens', 1) ??
      optionalInteger(body.max_tokens, 'max_tokens', 1),
    presencePenalty: optionalNumber(body.presence_penalty, 'presence_penalty', -2, 2),
    frequencyPenalty: optionalNumber(body.frequency_penalty, 'frequency_penalty', -2, 2),
    stop: stopSequences(body.stop, 'stop', { single: true }),
    ...samplingExtensions(body),
  });
}

function decodeResponseFormat(value: unknown): ResponseFormat | undefined {
  if (value === undefined || value === null) return undefined;
  const format = object(value, 'response_format');
  const type = oneOf(format.type, 'response_format.type', ['text', 'json_object', 'json_schema']);
  if (type === 'text') return undefined;
  if (type === 'json_object') return { type };
  const spec = object(format.json_schema, 'response_format.json_schema');
  string(spec.name, 'response_format.json_schema.name');
  // Without a schema the request still asks for JSON.
  if (spec.schema === undefined || spec.schema === null) return { type: 'json_object' };
  return { type, schema: jsonSchema(spec.schema, 'response_format.json_schema.schema') };
}
