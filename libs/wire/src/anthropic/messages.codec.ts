// The Anthropic Messages dialect: request decoding, SSE encoding, the non-streaming body and errors.
export * from './messages.types.js';
export * from './messages.decoder.js';
export * from './messages.encoder.js';
