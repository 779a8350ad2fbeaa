import { CortexError, type CanonicalRequest } from '@cortex/contracts';
import { status } from './chat.upstream.js';
import {
  contentParts,
  num,
  parseJson,
  readUsage,
  record,
  refuseUncarried,
  str,
  systemText,
  type EncodeOptions,
  type UpstreamBody,
  type UpstreamDecoder,
  type UpstreamEvent,
} from './upstream.types.js';

/**
 * The canonical request as an OpenAI Responses body, streamed and never stored upstream: the system
 * messages collapse into `instructions` (joined by blank lines), user text and images become
 * `input_text` / `input_image` parts (images as data URIs), assistant text an `output_text` part, its
 * calls `function_call` items, tool results `function_call_output` items. Reasoning from earlier turns
 * is not sent: an upstream takes back only reasoning items it wrote itself.
 */
export function encodeResponsesUpstream(request: CanonicalRequest, options: EncodeOptions): UpstreamBody {
  refuseUncarried(request, 'responses', [{ param: 'logprobs', set: request.logprobs !== undefined }]);
  if (request.prefill !== undefined)
    throw new CortexError(
      'invalid_request',
      `messages: ${request.model} is served by the OpenAI Responses API, which cannot go on from an answer ` +
        'already begun (a last assistant turn to continue); end the messages with a user turn',
      { param: 'messages' },
    );
  const input: Array<Record<string, unknown>> = [];
  for (const message of request.messages) {
    if (message.role === 'system') continue;
    if (message.role === 'tool') {
      input.push({ type: 'function_call_output', call_id: message.toolCallId ?? '', output: message.content });
      continue;
    }
    if (message.role === 'user') {
      input.push({
        type: 'message',
        role: 'user',
        content: contentParts(
          message,
          (text) => ({ type: 'input_text', text }),
          (image) => ({
            type: 'input_image',
            image_url: `data:${image.mediaType};base64,${image.data}`,
            ...(image.detail && { detail: image.detail }),
          }),
        ),
      });
      continue;
    }
    if (message.content !== '')
      input.push({ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: message.content }] });
    for (const call of message.toolCalls ?? [])
      input.push({ type: 'function_call', call_id: call.id, name: call.name, arguments: call.arguments });
  }
  const body: Record<string, unknown> = { model: options.model, input, stream: true, store: false };
  const instructions = systemText(request.messages);
  if (instructions !== undefined) body.instructions = instructions;
  if (request.tools?.length) {
    body.tools = request.tools.map((tool) => ({
      type: 'function',
      name: tool.name,
      ...(tool.description !== undefined && { description: tool.description }),
      parameters: tool.parameters ?? { type: 'object', properties: {} },
      strict: tool.strict ?? false,
    }));
    if (request.toolChoice)
      body.tool_choice = request.toolChoice.startsWith('function:')
        ? { type: 'function', name: request.toolChoice.slice('function:'.length) }
        : request.toolChoice;
    if (request.maxToolCalls === 1) body.parallel_tool_calls = false;
    else if (request.maxToolCalls !== undefined) body.max_tool_calls = request.maxToolCalls;
  }
  const { sampling } = request;
  if (sampling.maxTokens !== undefined) body.max_output_tokens = sampling.maxTokens;
  if (sampling.temperature !== undefined) body.temperature = sampling.temperature;
  if (sampling.topP !== undefined) body.top_p = sampling.topP;
  const format = request.responseFormat;
  if (format?.type === 'json_object') body.text = { format: { type: 'json_object' } };
  if (format?.type === 'json_schema')
    body.text = { format: { type: 'json_schema', name: 'response', schema: format.schema ?? {}, strict: true } };
  const effort = request.templateOptions?.reasoning_effort;
  if (options.reasoning) body.reasoning = { summary: 'auto', ...(effort !== undefined && { effort }) };
  return { path: '/responses', body };
}

/**
 * Reads a Responses stream by its event names: text deltas, reasoning (summary or full text), function
 * calls announced by `output_item.added` and their argument deltas correlated by `output_index`, the
 * arguments of a call whose deltas never came from its `output_item.done`, and the end: `completed` →
 * stop (tool calls when the answer has any), `incomplete` → length, `failed` or `error` → an error.
 */
export class ResponsesUpstreamDecoder implements UpstreamDecoder {
  done = false;
  /** The upstream's output index of each function call → ours, and whether its arguments streamed. */
  private readonly calls = new Map<number, { index: number; streamed: boolean }>();

  push(message: { event?: string | undefined; data: string }): UpstreamEvent[] {
    const event = parseJson(message.data);
    if (!event) return [];
    const type = str(event.type) ?? message.event ?? '';
    switch (type) {
      case 'response.output_text.delta': {
        const text = str(event.delta);
        return text ? [{ type: 'text', text }] : [];
      }
      case 'response.reasoning_summary_text.delta':
      case 'response.reasoning_text.delta': {
        const text = str(event.delta);
        return text ? [{ type: 'reasoning', text }] : [];
      }
      case 'response.output_item.added': {
        const item = record(event.item);
        if (str(item?.type) !== 'function_call') return [];
        const index = this.calls.size;
        this.calls.set(num(event.output_index) ?? index, { index, streamed: false });
        return [{ type: 'tool_call', index, id: str(item?.call_id) ?? `call_${index}`, name: str(item?.name) ?? '' }];
      }
      case 'response.function_call_arguments.delta': {
        const call = this.calls.get(num(event.output_index) ?? -1);
        const delta = str(event.delta);
        if (!call || !delta) return [];
        call.streamed = true;
        return [{ type: 'tool_args', index: call.index, delta }];
      }
      case 'response.output_item.done': {
        const call = this.calls.get(num(event.output_index) ?? -1);
        const args = str(record(event.item)?.arguments);
        if (!call || call.streamed || !args) return [];
        call.streamed = true;
        return [{ type: 'tool_args', index: call.index, delta: args }];
      }
      case 'response.completed':
      case 'response.incomplete':
        return this.end(record(event.response), type === 'response.incomplete');
      case 'response.failed': {
        this.done = true;
        const error = record(record(event.response)?.error);
        return [{ type: 'error', message: str(error?.message) ?? 'the upstream response failed' }];
      }
      case 'error': {
        this.done = true;
        const error = record(event.error) ?? event;
        return [{ type: 'error', message: str(error.message) ?? 'the upstream failed', ...status(error) }];
      }
      default:
        return [];
    }
  }

  private end(response: Record<string, unknown> | undefined, incomplete: boolean): UpstreamEvent[] {
    this.done = true;
    const out: UpstreamEvent[] = [];
    const usage = record(response?.usage);
    if (usage) out.push({ type: 'usage', usage: readUsage(usage, RESPONSES_USAGE) });
    const reason = incomplete ? 'length' : this.calls.size > 0 ? 'tool_calls' : 'stop';
    out.push({ type: 'finish', reason });
    return out;
  }
}

/** The Responses API's usage fields. */
const RESPONSES_USAGE = {
  promptTokens: 'input_tokens',
  completionTokens: 'output_tokens',
  cachedPromptTokens: 'input_tokens_details.cached_tokens',
  reasoningTokens: 'output_tokens_details.reasoning_tokens',
} as const;
