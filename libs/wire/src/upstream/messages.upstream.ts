import { CortexError, type CanonicalRequest } from '@cortex/contracts';
import {
  contentParts,
  num,
  parseJson,
  record,
  refuseUncarried,
  str,
  systemText,
  type EncodeOptions,
  type UpstreamBody,
  type UpstreamDecoder,
  type UpstreamEvent,
  type UpstreamUsage,
} from './upstream.types.js';

/** Anthropic requires `max_tokens`: what a request without one asks for. */
const MESSAGES_DEFAULT_MAX_TOKENS = 8192;
/** The least thinking budget Anthropic takes. */
const MIN_THINKING_BUDGET = 1024;

/**
 * The canonical request as an Anthropic Messages body, streamed: the system messages flattened into
 * `system`, images as base64 `image` blocks, assistant calls as `tool_use` blocks whose `input` is the
 * parsed arguments (text that is not JSON is sent as a string, so the body still serialises), tool
 * results as `tool_result` blocks in one user turn, `max_tokens` always (8192 when the request has
 * none). An upstream that reasons is asked to think unless the client said not to (and only when
 * `max_tokens` leaves room for Anthropic's least budget, 1,024 tokens).
 */
export function encodeMessagesUpstream(request: CanonicalRequest, options: EncodeOptions): UpstreamBody {
  refuseUncarried(request, 'messages', [
    { param: 'logprobs', set: request.logprobs !== undefined },
    { param: 'response_format', set: request.responseFormat !== undefined && request.responseFormat.type !== 'text' },
  ]);
  const messages: Array<{ role: 'user' | 'assistant'; content: Array<Record<string, unknown>> }> = [];
  const turn = (role: 'user' | 'assistant'): Array<Record<string, unknown>> => {
    const last = messages.at(-1);
    if (last?.role === role) return last.content;
    const content: Array<Record<string, unknown>> = [];
    messages.push({ role, content });
    return content;
  };
  for (const message of request.messages) {
    if (message.role === 'system') continue;
    if (message.role === 'tool') {
      turn('user').push({ type: 'tool_result', tool_use_id: message.toolCallId ?? '', content: message.content });
      continue;
    }
    if (message.role === 'user') {
      turn('user').push(
        ...contentParts(
          message,
          (text) => ({ type: 'text', text }),
          (image) => ({ type: 'image', source: { type: 'base64', media_type: image.mediaType, data: image.data } }),
        ).filter((part) => part.type !== 'text' || part.text !== ''),
      );
      continue;
    }
    const content = turn('assistant');
    if (message.content !== '') content.push({ type: 'text', text: message.content });
    for (const call of message.toolCalls ?? [])
      content.push({ type: 'tool_use', id: call.id, name: call.name, input: toolInput(call.arguments) });
  }
  // An answer already begun is Anthropic's prefill: a last assistant turn, which may not end in white space.
  const prefill = request.prefill?.trimEnd();
  if (prefill) turn('assistant').push({ type: 'text', text: prefill });
  const { sampling } = request;
  const maxTokens = sampling.maxTokens ?? MESSAGES_DEFAULT_MAX_TOKENS;
  const body: Record<string, unknown> = { model: options.model, messages, max_tokens: maxTokens, stream: true };
  const system = systemText(request.messages);
  if (system !== undefined) body.system = system;
  if (request.tools?.length) {
    body.tools = request.tools.map((tool) => ({
      name: tool.name,
      ...(tool.description !== undefined && { description: tool.description }),
      input_schema: tool.parameters ?? { type: 'object', properties: {} },
    }));
    const parallel = request.maxToolCalls === 1 ? { disable_parallel_tool_use: true } : {};
    const choice = request.toolChoice ?? 'auto';
    body.tool_choice = choice.startsWith('function:')
      ? { type: 'tool', name: choice.slice('function:'.length), ...parallel }
      : { type: choice === 'required' ? 'any' : 'auto', ...parallel };
  }
  if (sampling.temperature !== undefined && sampling.temperature > 1)
    throw new CortexError(
      'invalid_request',
      `temperature: ${request.model} is served by an Anthropic Messages API, which takes 0 to 1; got ${sampling.temperature}`,
      { param: 'temperature' },
    );
  if (sampling.temperature !== undefined) body.temperature = sampling.temperature;
  if (sampling.topP !== undefined) body.top_p = sampling.topP;
  if (sampling.topK !== undefined) body.top_k = sampling.topK;
  if (sampling.stop?.length) body.stop_sequences = sampling.stop;
  // Anthropic's budget is at least 1,024 tokens and less than max_tokens: a shorter answer is not asked to think.
  if (options.reasoning && request.showReasoning !== false && maxTokens > MIN_THINKING_BUDGET)
    body.thinking = {
      type: 'enabled',
      budget_tokens: Math.min(maxTokens - 1, Math.max(MIN_THINKING_BUDGET, Math.floor(maxTokens / 2))),
    };
  const heldBack = request.prefill?.slice(prefill?.length ?? 0);
  return { path: '/messages', body, ...(heldBack && { heldBack }) };
}

/** A call's arguments as a `tool_use` input: the parsed object, or the text itself when it is not a JSON object. */
function toolInput(args: string): unknown {
  try {
    const value: unknown = JSON.parse(args);
    return value !== null && typeof value === 'object' && !Array.isArray(value) ? value : args;
  } catch {
    return args;
  }
}

/**
 * Reads a Messages stream: `message_start`'s usage (cache reads are cached prompt tokens, cache writes
 * prompt tokens like the rest), `content_block_*` for text, `thinking` and `tool_use` (its input
 * streamed as `input_json_delta`, or given whole in the start block), `message_delta`'s stop reason
 * and output tokens, `message_stop`; `ping` is ignored and `error` ends the stream.
 */
export class MessagesUpstreamDecoder implements UpstreamDecoder {
  done = false;
  /** Content block index → our call index, for `tool_use` blocks. */
  private readonly calls = new Map<number, number>();
  private readonly usage: UpstreamUsage = {};

  push(message: { event?: string | undefined; data: string }): UpstreamEvent[] {
    const event = parseJson(message.data);
    if (!event) return [];
    switch (str(event.type) ?? message.event) {
      case 'message_start': {
        const usage = record(record(event.message)?.usage);
        if (!usage) return [];
        const read = num(usage.cache_read_input_tokens) ?? 0;
        const written = num(usage.cache_creation_input_tokens) ?? 0;
        this.usage.promptTokens = (num(usage.input_tokens) ?? 0) + read + written;
        this.usage.cachedPromptTokens = read;
        const output = num(usage.output_tokens);
        if (output !== undefined) this.usage.completionTokens = output;
        return [{ type: 'usage', usage: { ...this.usage } }];
      }
      case 'content_block_start': {
        const block = record(event.content_block);
        if (str(block?.type) !== 'tool_use') {
          const text = str(block?.text) ?? str(block?.thinking);
          if (!text) return [];
          return [{ type: str(block?.type) === 'thinking' ? 'reasoning' : 'text', text }];
        }
        const index = this.calls.size;
        this.calls.set(num(event.index) ?? index, index);
        const out: UpstreamEvent[] = [
          { type: 'tool_call', index, id: str(block?.id) ?? `toolu_${index}`, name: str(block?.name) ?? '' },
        ];
        // A server that buffers the input sends it whole here; an empty object is the streamed kind's start.
        const input = block?.input;
        if (input !== undefined && !(record(input) && Object.keys(input as object).length === 0))
          out.push({ type: 'tool_args', index, delta: typeof input === 'string' ? input : JSON.stringify(input) });
        return out;
      }
      case 'content_block_delta': {
        const delta = record(event.delta);
        switch (str(delta?.type)) {
          case 'text_delta': {
            const text = str(delta?.text);
            return text ? [{ type: 'text', text }] : [];
          }
          case 'thinking_delta': {
            const text = str(delta?.thinking);
            return text ? [{ type: 'reasoning', text }] : [];
          }
          case 'input_json_delta': {
            const index = this.calls.get(num(event.index) ?? -1);
            const json = str(delta?.partial_json);
            return index !== undefined && json ? [{ type: 'tool_args', index, delta: json }] : [];
          }
          default:
            return [];
        }
      }
      case 'message_delta': {
        const out: UpstreamEvent[] = [];
        const output = num(record(event.usage)?.output_tokens);
        if (output !== undefined) {
          this.usage.completionTokens = output;
          out.push({ type: 'usage', usage: { ...this.usage } });
        }
        const delta = record(event.delta);
        const reason = str(delta?.stop_reason);
        if (reason) {
          const stopSequence = str(delta?.stop_sequence);
          out.push({
            type: 'finish',
            reason: reason === 'max_tokens' ? 'length' : reason === 'tool_use' ? 'tool_calls' : 'stop',
            ...(reason === 'stop_sequence' && stopSequence && { stopSequence }),
          });
        }
        return out;
      }
      case 'message_stop':
        this.done = true;
        return [];
      case 'error': {
        this.done = true;
        const error = record(event.error);
        return [{ type: 'error', message: str(error?.message) ?? 'the upstream failed', ...errorStatus(error) }];
      }
      default:
        return [];
    }
  }
}

/** Anthropic's error types as the statuses they come with. */
function errorStatus(error: Record<string, unknown> | undefined): { status?: number } {
  const statuses: Record<string, number> = {
    invalid_request_error: 400,
    authentication_error: 401,
    permission_error: 403,
    not_found_error: 404,
    request_too_large: 413,
    rate_limit_error: 429,
    api_error: 500,
    overloaded_error: 529,
  };
  const status = statuses[str(error?.type) ?? ''];
  return status === undefined ? {} : { status };
}
