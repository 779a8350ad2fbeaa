import type { Attributes } from '@opentelemetry/api';
import type { CanonicalRequest, Dialect, FinishReason, RetrievalApi, Usage } from '@cortex/contracts';

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
  if (sampling.frequencyPenalty !== undefined) attributes['gen_ai.request.frequency_penalty'] = sampling.frequencyPenalty;
  if (sampling.stop?.length) attributes['gen_ai.request.stop_sequences'] = sampling.stop;
  return attributes;
}

/**
 * What the model did: the model that answered, the token counts (cached prompt tokens and reasoning
 * tokens included) and the finish reason.
 */
export function genAiResponseAttributes(model: string, usage: Usage | null, finishReason: FinishReason | null): Attributes {
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
