import { ChatChunkEncoder, ChatCompletionAggregator, openAiError } from '@cortex/wire';
import type { DialectAdapter, ResponseMeta } from '../inference/dialect.js';

/** `x-include-thinking: true` puts reasoning into `content` as `<think>…</think>`. */
const inlineReasoning = (meta: ResponseMeta): boolean => String(meta.headers['x-include-thinking']).toLowerCase() === 'true';

/** OpenAI Chat Completions rendering: `chat.completion.chunk` frames ending in `[DONE]`, or one body. */
export const openAiChatAdapter: DialectAdapter = {
  dialect: 'openai.chat',
  stream(request, meta) {
    const encoder = new ChatChunkEncoder({ id: `chatcmpl-${meta.id}`, model: request.model, created: meta.created, includeUsage: request.includeUsage ?? false, inlineReasoning: inlineReasoning(meta), logprobs: request.logprobs !== undefined });
    return {
      terminator: true,
      frames: (event) => encoder.encode(event).map((data) => ({ data })),
      progress: (text) => encoder.encode({ seq: 0, type: 'reasoning', text }).map((data) => ({ data })),
      errorFrames: (error) => [{ data: openAiError(error) }],
    };
  },
  complete(request, meta) {
    return new ChatCompletionAggregator({ id: `chatcmpl-${meta.id}`, model: request.model, created: meta.created, inlineReasoning: inlineReasoning(meta), logprobs: request.logprobs !== undefined });
  },
};
