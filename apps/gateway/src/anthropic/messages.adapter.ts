import { anthropicError, MessagesAggregator, MessagesStreamEncoder } from '@cortex/wire';
import type { StreamEvent } from '@cortex/contracts';
import type { DialectAdapter } from '../inference/dialect.js';

const hintOf = (event: StreamEvent) => (event.type === 'finish' && event.stopSequence !== undefined ? { stopSequence: event.stopSequence } : {});

/** Anthropic Messages rendering: named events (`message_start` … `message_stop`), or one Message. */
export const anthropicMessagesAdapter: DialectAdapter = {
  dialect: 'anthropic.messages',
  stream(request, meta) {
    const encoder = new MessagesStreamEncoder({ id: `msg_${meta.id}`, model: request.model, thinking: request.showReasoning ?? false });
    return {
      terminator: false,
      frames: (event) => encoder.encode(event, hintOf(event)),
      errorFrames: (error) => [{ event: 'error', data: anthropicError(error) }],
    };
  },
  complete(request, meta) {
    const aggregator = new MessagesAggregator({ id: `msg_${meta.id}`, model: request.model, thinking: request.showReasoning ?? false });
    return { add: (event) => aggregator.add(event, hintOf(event)), body: () => aggregator.body() };
  },
};
