import { anthropicError, MessagesAggregator, MessagesStreamEncoder } from '@cortex/wire';
import type { DialectAdapter } from '../inference/dialect.js';

/** Anthropic Messages rendering: named events (`message_start` … `message_stop`), or one Message. */
export const anthropicMessagesAdapter: DialectAdapter = {
  dialect: 'anthropic.messages',
  stream(request, meta) {
    const encoder = new MessagesStreamEncoder({
      id: `msg_${meta.id}`,
      model: request.model,
      thinking: request.showReasoning ?? false,
    });
    return {
      terminator: false,
      frames: (event) => encoder.encode(event),
      errorFrames: (error) => [{ event: 'error', data: anthropicError(error) }],
    };
  },
  complete(request, meta) {
    const aggregator = new MessagesAggregator({
      id: `msg_${meta.id}`,
      model: request.model,
      thinking: request.showReasoning ?? false,
    });
    return { add: (event) => aggregator.add(event), body: () => aggregator.body() };
  },
};
