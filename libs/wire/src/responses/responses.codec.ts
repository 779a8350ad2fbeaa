// The OpenResponses / OpenAI Responses dialect: request decoding, item normalization, SSE encoding, the
// non-streaming body and errors. Storage (previous_response_id, conversations, item references) is the
// caller's: the decoder names what to fetch, `itemsToMessages` turns fetched items back into messages.
export * from './responses.types.js';
export * from './responses.items.js';
export * from './responses.decoder.js';
export * from './responses.resource.js';
export * from './responses.encoder.js';
export * from './responses.state.js';
export * from './responses.socket.js';
export * from './reasoning-seal.js';
export * from './responses.compaction.js';
export * from './responses.background.js';
export * from './responses.assembly.js';
