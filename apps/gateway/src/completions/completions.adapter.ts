import { CompletionAggregator, CompletionChunkEncoder, openAiError } from '@cortex/wire';
import type { StreamEvent } from '@cortex/contracts';
import type { DialectAdapter } from '../inference/dialect.js';
import { choiceOf, choicesOf } from './fan-out-run.js';

/** Legacy OpenAI Completions rendering: `text_completion` frames ending in `[DONE]`, or one body. */
export const openAiCompletionsAdapter: DialectAdapter = {
  dialect: 'openai.completions',
  stream(request, meta, state) {
    const encoder = new CompletionChunkEncoder({
      id: `cmpl-${meta.id}`,
      model: request.model,
      created: meta.created,
      includeUsage: request.includeUsage ?? false,
      choices: choicesOf(state),
      logprobs: request.logprobs !== undefined,
    });
    return {
      terminator: true,
      frames: (event: StreamEvent) => encoder.encode(event, choiceOf(event)).map((data) => ({ data })),
      errorFrames: (error) => [{ data: openAiError(error) }],
    };
  },
  complete(request, meta, state) {
    const aggregator = new CompletionAggregator({
      id: `cmpl-${meta.id}`,
      model: request.model,
      created: meta.created,
      choices: choicesOf(state),
      logprobs: request.logprobs !== undefined,
    });
    return { add: (event) => aggregator.add(event, choiceOf(event)), body: () => aggregator.body() };
  },
};
