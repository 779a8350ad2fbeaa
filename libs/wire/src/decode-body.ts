import type { CanonicalRequest } from '@cortex/contracts';
import { decodeChatRequest } from './openai/chat.decoder.js';
import { decodeCompletionRequest } from './openai/completions.decoder.js';
import { decodeMessagesRequest } from './anthropic/messages.decoder.js';
import type { DecodeOptions } from './hosted-tools.js';

/** A body decoded to the canonical request, and the tools left out because no model can run them (for the log). */
export interface DecodedBody {
  request: CanonicalRequest;
  droppedTools: string[];
}

/**
 * Chat Completions, Messages and Completions bodies to the canonical request: each depends on its body
 * alone, so the gateway decodes them where they arrive and the translator the same way. Null for a
 * dialect that needs stored state (Responses). `session` is a session header's affinity key.
 */
export function decodeBody(
  dialect: string,
  body: unknown,
  session: string | undefined,
  options: DecodeOptions,
): DecodedBody | null {
  switch (dialect) {
    case 'openai.chat':
      return { request: withSession(decodeChatRequest(body), session), droppedTools: [] };
    case 'anthropic.messages': {
      const { request, thinking, droppedTools } = decodeMessagesRequest(body, options);
      return { request: withSession({ ...request, showReasoning: thinking }, session), droppedTools };
    }
    case 'openai.completions':
      return { request: withSession(decodeCompletionRequest(body), session), droppedTools: [] };
    default:
      return null;
  }
}

/** A session header names the conversation before the body does. */
function withSession(request: CanonicalRequest, session: string | undefined): CanonicalRequest {
  return session ? { ...request, affinityKey: session } : request;
}
