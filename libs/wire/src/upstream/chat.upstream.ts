import type { CanonicalMessage, CanonicalRequest, TokenLogprob } from '@cortex/contracts';
import {
  contentParts,
  num,
  parseJson,
  readUsage,
  record,
  refuseUncarried,
  str,
  type EncodeOptions,
  type UpstreamBody,
  type UpstreamDecoder,
  type UpstreamEvent,
} from './upstream.types.js';

/**
 * The canonical request as an OpenAI Chat Completions body, always streamed with its usage: the API of
 * OpenAI, llama.cpp's `llama-server`, vLLM, Ollama's `/v1` and another cortex. The sampling extensions
 * (`top_k`, `min_p`, `repetition_penalty`) are sent only when the request set them.
 */
export function encodeChatUpstream(request: CanonicalRequest, options: EncodeOptions): UpstreamBody {
  refuseUncarried(request, 'chat');
  const { sampling } = request;
  const body: Record<string, unknown> = {
    model: options.model,
    messages: request.messages.map(chatMessage),
    stream: true,
    stream_options: { include_usage: true },
  };
  // An answer already begun goes on from its text: vLLM's continue_final_message, which llama.cpp's server reads too.
  if (request.prefill !== undefined) {
    (body.messages as unknown[]).push({ role: 'assistant', content: request.prefill });
    body.continue_final_message = true;
    body.add_generation_prompt = false;
  }
  if (request.tools?.length) {
    body.tools = request.tools.map((tool) => ({
      type: 'function',
      function: {
        name: tool.name,
        ...(tool.description !== undefined && { description: tool.description }),
        parameters: tool.parameters ?? { type: 'object', properties: {} },
        ...(tool.strict !== undefined && { strict: tool.strict }),
      },
    }));
    if (request.toolChoice) body.tool_choice = chatToolChoice(request.toolChoice);
    if (request.maxToolCalls === 1) body.parallel_tool_calls = false;
  }
  const fields: Array<[string, unknown]> = [
    ['max_tokens', sampling.maxTokens],
    ['temperature', sampling.temperature],
    ['top_p', sampling.topP],
    ['top_k', sampling.topK],
    ['min_p', sampling.minP],
    ['repetition_penalty', sampling.repetitionPenalty],
    ['seed', sampling.seed],
    ['stop', sampling.stop?.length ? sampling.stop : undefined],
    ['presence_penalty', sampling.presencePenalty],
    ['frequency_penalty', sampling.frequencyPenalty],
    ['logit_bias', sampling.logitBias],
  ];
  for (const [name, value] of fields) if (value !== undefined) body[name] = value;
  const format = request.responseFormat;
  if (format?.type === 'json_object') body.response_format = { type: 'json_object' };
  if (format?.type === 'json_schema')
    body.response_format = {
      type: 'json_schema',
      json_schema: { name: 'response', schema: format.schema ?? {}, strict: true },
    };
  if (request.logprobs !== undefined) {
    body.logprobs = true;
    if (request.logprobs > 0) body.top_logprobs = request.logprobs;
  }
  const { reasoning_effort: effort, ...kwargs } = request.templateOptions ?? {};
  if (effort !== undefined) body.reasoning_effort = effort;
  // llama.cpp's and vLLM's name for what the model's template reads.
  if (Object.keys(kwargs).length > 0) body.chat_template_kwargs = kwargs;
  return { path: '/chat/completions', body };
}

function chatMessage(message: CanonicalMessage): Record<string, unknown> {
  switch (message.role) {
    case 'system':
      return { role: 'system', content: message.content };
    case 'tool':
      return { role: 'tool', tool_call_id: message.toolCallId ?? '', content: message.content };
    case 'assistant':
      return {
        role: 'assistant',
        content: message.content === '' && message.toolCalls?.length ? null : message.content,
        ...(message.toolCalls?.length && {
          tool_calls: message.toolCalls.map((call) => ({
            id: call.id,
            type: 'function',
            function: { name: call.name, arguments: call.arguments },
          })),
        }),
      };
    case 'user':
      return {
        role: 'user',
        content: message.images?.length
          ? contentParts(
              message,
              (text) => ({ type: 'text', text }),
              (image) => ({
                type: 'image_url',
                image_url: {
                  url: `data:${image.mediaType};base64,${image.data}`,
                  ...(image.detail && { detail: image.detail }),
                },
              }),
            )
          : message.content,
        ...(message.name !== undefined && { name: message.name }),
      };
  }
}

function chatToolChoice(choice: string): unknown {
  if (choice.startsWith('function:')) return { type: 'function', function: { name: choice.slice('function:'.length) } };
  return choice;
}

/**
 * Reads a Chat Completions stream: `delta.content`, `delta.reasoning_content` (llama.cpp, vLLM,
 * DeepSeek) or `delta.reasoning` (vLLM's newer name, Ollama), `delta.tool_calls` by their `index`, the
 * finish reason, the usage chunk, an `error` object, `[DONE]`. Only the first choice is read: the
 * request never asks for more.
 */
export class ChatUpstreamDecoder implements UpstreamDecoder {
  done = false;
  private finished = false;
  /** The upstream's call index → ours (calls numbered in the order they began). */
  private readonly calls = new Map<number, number>();

  push(message: { event?: string | undefined; data: string }): UpstreamEvent[] {
    if (message.data === '[DONE]') {
      this.done = true;
      return [];
    }
    const chunk = parseJson(message.data);
    if (!chunk)
      return [{ type: 'error', message: `the upstream sent a chunk that is not JSON: ${message.data.slice(0, 200)}` }];
    const error = record(chunk.error);
    if (error) return [{ type: 'error', message: str(error.message) ?? JSON.stringify(error), ...status(error) }];
    const out: UpstreamEvent[] = [];
    const choice = record((chunk.choices as unknown[] | undefined)?.[0]);
    const delta = record(choice?.delta);
    if (delta) {
      const reasoning = str(delta.reasoning_content) ?? str(delta.reasoning);
      if (reasoning) out.push({ type: 'reasoning', text: reasoning });
      const content = str(delta.content);
      const logprobs = chatLogprobs(record(choice?.logprobs)?.content);
      if (content) out.push({ type: 'text', text: content, ...(logprobs && { logprobs }) });
      for (const raw of Array.isArray(delta.tool_calls) ? delta.tool_calls : []) this.toolCall(record(raw), out);
    }
    const reason = str(choice?.finish_reason);
    if (reason && !this.finished) {
      this.finished = true;
      out.push({ type: 'finish', reason: finishReason(reason, this.calls.size > 0) });
    }
    const usage = record(chunk.usage);
    if (usage) out.push({ type: 'usage', usage: readUsage(usage, CHAT_USAGE) });
    return out;
  }

  private toolCall(call: Record<string, unknown> | undefined, out: UpstreamEvent[]): void {
    if (!call) return;
    const upstreamIndex = num(call.index) ?? this.calls.size;
    const fn = record(call.function);
    let index = this.calls.get(upstreamIndex);
    if (index === undefined) {
      index = this.calls.size;
      this.calls.set(upstreamIndex, index);
      out.push({
        type: 'tool_call',
        index,
        id: str(call.id) ?? `call_${index}`,
        name: str(fn?.name) ?? '',
      });
    }
    const args = str(fn?.arguments);
    if (args) out.push({ type: 'tool_args', index, delta: args });
  }
}

function finishReason(reason: string, called: boolean): 'stop' | 'length' | 'tool_calls' {
  if (reason === 'length') return 'length';
  if (reason === 'tool_calls' || reason === 'function_call' || called) return 'tool_calls';
  return 'stop';
}

/** Chat Completions' usage fields. */
const CHAT_USAGE = {
  promptTokens: 'prompt_tokens',
  completionTokens: 'completion_tokens',
  cachedPromptTokens: 'prompt_tokens_details.cached_tokens',
  reasoningTokens: 'completion_tokens_details.reasoning_tokens',
} as const;

function chatLogprobs(content: unknown): TokenLogprob[] | undefined {
  if (!Array.isArray(content) || content.length === 0) return undefined;
  const entry = (raw: unknown): TokenLogprob['top'][number] => {
    const e = record(raw) ?? {};
    const token = str(e.token) ?? '';
    return {
      token,
      logprob: num(e.logprob) ?? 0,
      bytes: Array.isArray(e.bytes) ? (e.bytes as number[]) : [...Buffer.from(token, 'utf8')],
    };
  };
  return content.map((raw) => ({
    ...entry(raw),
    top: Array.isArray(record(raw)?.top_logprobs) ? (record(raw)?.top_logprobs as unknown[]).map(entry) : [],
  }));
}

/** The HTTP status an error object names, where it names one (llama.cpp's `code`, vLLM's `code`). */
export function status(error: Record<string, unknown>): { status?: number } {
  const code = num(error.code) ?? num(error.status);
  return code !== undefined && code >= 400 && code < 600 ? { status: code } : {};
}
