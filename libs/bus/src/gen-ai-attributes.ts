import type { Attributes } from '@opentelemetry/api';
import type {
  CanonicalMessage,
  CanonicalRequest,
  Dialect,
  FinishReason,
  RetrievalApi,
  ToolCall,
  Usage,
} from '@cortex/contracts';

/**
 * Span attributes of the OpenTelemetry GenAI semantic conventions for cortex's requests: pure
 * functions of the canonical request, the usage and the finish, shared by the gateway's request
 * span and the worker's generation span so both carry the same names and numbers.
 */

/** `gen_ai.provider.name`: cortex serves its own models. */
export const GEN_AI_PROVIDER = 'cortex';

/** `gen_ai.operation.name` of a dialect: the span is named `<operation> <model>`. */
export function genAiOperation(api: Dialect | RetrievalApi, request?: Pick<CanonicalRequest, 'raw'> | null): string {
  if (api === 'openai.embeddings') return 'embeddings';
  if (api === 'rerank') return 'rerank';
  if (api === 'openai.completions' || request?.raw) return 'text_completion';
  return 'chat';
}

/** What the request asked for: model, sampling, limits, streaming. Message contents are never included. */
export function genAiRequestAttributes(operation: string, request: CanonicalRequest): Attributes {
  const { sampling } = request;
  const attributes: Attributes = {
    'gen_ai.operation.name': operation,
    'gen_ai.provider.name': GEN_AI_PROVIDER,
    'gen_ai.request.model': request.model,
    'gen_ai.request.stream': request.stream,
    'gen_ai.output.type': request.responseFormat && request.responseFormat.type !== 'text' ? 'json' : 'text',
  };
  if (sampling.maxTokens !== undefined) attributes['gen_ai.request.max_tokens'] = sampling.maxTokens;
  if (sampling.temperature !== undefined) attributes['gen_ai.request.temperature'] = sampling.temperature;
  if (sampling.topP !== undefined) attributes['gen_ai.request.top_p'] = sampling.topP;
  if (sampling.topK !== undefined) attributes['gen_ai.request.top_k'] = sampling.topK;
  if (sampling.seed !== undefined) attributes['gen_ai.request.seed'] = sampling.seed;
  if (sampling.presencePenalty !== undefined) attributes['gen_ai.request.presence_penalty'] = sampling.presencePenalty;
  if (sampling.frequencyPenalty !== undefined)
    attributes['gen_ai.request.frequency_penalty'] = sampling.frequencyPenalty;
  if (sampling.stop?.length) attributes['gen_ai.request.stop_sequences'] = sampling.stop;
  return attributes;
}

/**
 * What the model did: the model that answered, the token counts (cached prompt tokens and reasoning
 * tokens included) and the finish reason.
 */
export function genAiResponseAttributes(
  model: string,
  usage: Usage | null,
  finishReason: FinishReason | null,
): Attributes {
  const attributes: Attributes = { 'gen_ai.response.model': model };
  if (finishReason) attributes['gen_ai.response.finish_reasons'] = [finishReason];
  if (usage) {
    attributes['gen_ai.usage.input_tokens'] = usage.promptTokens;
    attributes['gen_ai.usage.output_tokens'] = usage.completionTokens;
    attributes['gen_ai.usage.cache_read.input_tokens'] = usage.cachedPromptTokens;
    attributes['gen_ai.usage.reasoning.output_tokens'] = usage.reasoningTokens;
  }
  return attributes;
}

/** One part of a message as the GenAI conventions write `gen_ai.input.messages` / `gen_ai.output.messages`. */
type MessagePart =
  | { type: 'text'; content: string }
  | { type: 'reasoning'; content: string }
  | { type: 'tool_call'; id: string; name: string; arguments: string }
  | { type: 'tool_call_response'; id: string; response: string };

function toolCallParts(calls: readonly ToolCall[] | undefined): MessagePart[] {
  return (calls ?? []).map((call) => ({ type: 'tool_call', id: call.id, name: call.name, arguments: call.arguments }));
}

/** `gen_ai.input.messages`: the request's messages (JSON), for spans that opted in to message contents. */
export function genAiInputMessages(messages: readonly CanonicalMessage[]): string {
  return JSON.stringify(
    messages.map((message) => {
      const parts: MessagePart[] = [];
      if (message.reasoning) parts.push({ type: 'reasoning', content: message.reasoning });
      if (message.role === 'tool')
        parts.push({ type: 'tool_call_response', id: message.toolCallId ?? '', response: message.content });
      else if (message.content) parts.push({ type: 'text', content: message.content });
      parts.push(...toolCallParts(message.toolCalls));
      return { role: message.role, parts };
    }),
  );
}

/** `gen_ai.output.messages`: what the model answered (JSON), for spans that opted in to message contents. */
export function genAiOutputMessages(
  output: { text: string; reasoning: string; toolCalls: readonly ToolCall[] },
  finishReason: FinishReason,
): string {
  const parts: MessagePart[] = [];
  if (output.reasoning) parts.push({ type: 'reasoning', content: output.reasoning });
  if (output.text) parts.push({ type: 'text', content: output.text });
  parts.push(...toolCallParts(output.toolCalls));
  return JSON.stringify([{ role: 'assistant', parts, finish_reason: finishReason }]);
}
