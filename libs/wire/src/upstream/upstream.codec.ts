import type { CanonicalRequest, UpstreamApi } from '@cortex/contracts';
import { ChatUpstreamDecoder, encodeChatUpstream } from './chat.upstream.js';
import { encodeMessagesUpstream, MessagesUpstreamDecoder } from './messages.upstream.js';
import { encodeResponsesUpstream, ResponsesUpstreamDecoder } from './responses.upstream.js';
import type { EncodeOptions, UpstreamBody, UpstreamDecoder } from './upstream.types.js';

export * from './upstream.types.js';

/** One client provider per wire format: the request's encoder and the stream's decoder. */
export interface UpstreamCodec {
  encode(request: CanonicalRequest, options: EncodeOptions): UpstreamBody;
  decoder(): UpstreamDecoder;
}

export const UPSTREAM_CODECS: Record<UpstreamApi, UpstreamCodec> = {
  chat: { encode: encodeChatUpstream, decoder: () => new ChatUpstreamDecoder() },
  responses: { encode: encodeResponsesUpstream, decoder: () => new ResponsesUpstreamDecoder() },
  messages: { encode: encodeMessagesUpstream, decoder: () => new MessagesUpstreamDecoder() },
};
