export * from './sse.js';
export * from './openai/chat.decoder.js';
export * from './openai/chat.encoder.js';
export * from './anthropic/messages.codec.js';
export * from './responses/responses.codec.js';
export * from './affinity.js';
export * from './hosted-tools.js';
