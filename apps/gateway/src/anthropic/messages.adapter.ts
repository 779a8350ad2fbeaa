import { anthropicError, MessagesAggregator, MessagesStreamEncoder } from '@cortex/wire';
import { answerModel, type DialectAdapter } from '../inference/dialect.js';

/** Anthropic Messages rendering: named events (`message_start` … `message_stop`), or one Message. */
export const anthropicMessagesAdapter: DialectAdapter = {
  dialect: 'anthropic.messages',
  stream(request, meta) {
    const encoder = new MessagesStreamEncoder(
      Object.assign(answerModel(request, meta), { id: `msg_${meta.id}`, thinking: request.showReasoning ?? false }),
    );
    return {
      terminator: false,
      frames: (event) => encoder.encode(event),
      errorFrames: (error) => [{ event: 'error', data: anthropicError(error) }],
    };
  },
  complete(request, meta) {
    const aggregator = new MessagesAggregator(
      Object.assign(answerModel(request, meta), { id: `msg_${meta.id}`, thinking: request.showReasoning ?? false }),
    );
    return { add: (event) => aggregator.add(event), body: () => aggregator.body() };
  },
};
