import { Controller } from '@nestjs/common';
import { MessagePattern } from '@nestjs/microservices';
import { CortexError, decodeMessage, DecodeRequest, Subjects, type CanonicalRequest } from '@cortex/contracts';
import { decodeChatRequest, decodeMessagesRequest } from '@cortex/wire';

/** Dialect bodies → the canonical request. Stateless, so any number of replicas share the queue group. */
@Controller()
export class TranslatorController {
  @MessagePattern(Subjects.translatorDecode)
  decode(payload: unknown): CanonicalRequest {
    const request = decodeMessage(DecodeRequest, payload);
    switch (request.dialect) {
      case 'openai.chat':
        return decodeChatRequest(request.body);
      case 'anthropic.messages': {
        const { request: canonical, thinking } = decodeMessagesRequest(request.body);
        return { ...canonical, showReasoning: thinking };
      }
      default:
        throw new CortexError('not_found', `dialect ${request.dialect} is not served by this translator`);
    }
  }
}
