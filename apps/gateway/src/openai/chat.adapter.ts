import {
  ChatChoicesAggregator,
  ChatChoicesEncoder,
  ChatChunkEncoder,
  ChatCompletionAggregator,
  openAiError,
} from '@cortex/wire';
import { answerModel, type DialectAdapter, type ResponseMeta } from '../inference/dialect.js';
import { choiceOf, choicesOf } from '../completions/fan-out-run.js';

/** `x-include-thinking: true` puts reasoning into `content` as `<think>…</think>`. */
const inlineReasoning = (meta: ResponseMeta): boolean =>
  String(meta.headers['x-include-thinking']).toLowerCase() === 'true';

/**
 * OpenAI Chat Completions rendering: `chat.completion.chunk` frames ending in `[DONE]`, or one body.
 * A request with several choices (`n`, a FanOutRun) has each choice's events tagged with its index.
 */
export const openAiChatAdapter: DialectAdapter = {
  dialect: 'openai.chat',
  stream(request, meta, state) {
    const options = Object.assign(answerModel(request, meta), {
      id: `chatcmpl-${meta.id}`,
      created: meta.created,
      includeUsage: request.includeUsage ?? false,
      inlineReasoning: inlineReasoning(meta),
      logprobs: request.logprobs !== undefined,
    });
    const choices = choicesOf(state);
    const single = choices === 1 ? new ChatChunkEncoder(options) : null;
    const several = choices > 1 ? new ChatChoicesEncoder({ ...options, choices }) : null;
    const encode = (event: Parameters<ChatChunkEncoder['encode']>[0]) =>
      single?.encode(event) ?? several?.encode(event, choiceOf(event)) ?? [];
    return {
      terminator: true,
      frames: (event) => encode(event).map((data) => ({ data })),
      progress: (text) => encode({ seq: 0, type: 'reasoning', text }).map((data) => ({ data })),
      errorFrames: (error) => [{ data: openAiError(error) }],
    };
  },
  complete(request, meta, state) {
    const options = Object.assign(answerModel(request, meta), {
      id: `chatcmpl-${meta.id}`,
      created: meta.created,
      inlineReasoning: inlineReasoning(meta),
      logprobs: request.logprobs !== undefined,
    });
    const choices = choicesOf(state);
    if (choices === 1) return new ChatCompletionAggregator(options);
    const aggregator = new ChatChoicesAggregator({ ...options, choices });
    return { add: (event) => aggregator.add(event, choiceOf(event)), body: () => aggregator.body() };
  },
};
