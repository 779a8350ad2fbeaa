import { ChatChunkEncoder, ChatCompletionAggregator, openAiError } from '@cortex/wire';
import type { DialectAdapter } from '../inference/dialect.js';

/** OpenAI Chat Completions rendering: `chat.completion.chunk` frames ending in `[DONE]`, or one body. */
export const openAiChatAdapter: DialectAdapter = {
  dialect: 'openai.chat',
  stream(request, meta) {
    const encoder = new ChatChunkEncoder({ id: `chatcmpl-${meta.id}`, model: request.model, created: meta.created, includeUsage: request.includeUsage ?? false });
    return {
      terminator: true,
      frames: (event) => encoder.encode(event).map((data) => ({ data })),
      errorFrames: (error) => [{ data: openAiError(error) }],
    };
  },
  complete(request, meta) {
    return new ChatCompletionAggregator({ id: `chatcmpl-${meta.id}`, model: request.model, created: meta.created });
  },
};
