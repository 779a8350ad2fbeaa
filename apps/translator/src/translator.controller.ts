import { Controller, Inject, Logger } from '@nestjs/common';
import { Ctx, MessagePattern, Payload } from '@nestjs/microservices';
import type { BusContext } from '@cortex/bus';
import { CONFIG, type CortexConfig } from '@cortex/config';
import { CortexError, decodeMessage, DecodeRequest, Subjects, type CanonicalRequest, type DecodedRequest } from '@cortex/contracts';
import { decodeChatRequest, decodeMessagesRequest, type DecodeOptions, type ResponseResource, type ResponsesState } from '@cortex/wire';
import { ResponsesService } from './responses/responses.service.js';

interface IdPayload {
  id: string;
}

/** Dialect bodies → the canonical request, and the Responses API's stored state. */
@Controller()
export class TranslatorController {
  private readonly logger = new Logger('translator');

  private readonly options: DecodeOptions;

  constructor(
    private readonly responses: ResponsesService,
    @Inject(CONFIG) config: CortexConfig,
  ) {
    this.options = { hostedTools: config.gateway.hostedTools };
  }

  @MessagePattern(Subjects.translatorDecode)
  async decode(@Payload() payload: unknown, @Ctx() context: BusContext): Promise<DecodedRequest> {
    const request = decodeMessage(DecodeRequest, payload);
    try {
      const { droppedTools, ...decoded } = await this.decodeDialect(request);
      if (droppedTools.length > 0) {
        this.logger.log({ msg: `dropped tools the model cannot run: ${droppedTools.join(', ')}`, requestId: context.requestId, dialect: request.dialect });
      }
      this.logger.log({ msg: `decoded ${request.dialect} for ${decoded.request.model}`, requestId: context.requestId, messages: decoded.request.messages.length, stream: decoded.request.stream });
      return decoded;
    } catch (error) {
      this.logger.log({ msg: `rejected ${request.dialect}: ${(error as Error).message}`, requestId: context.requestId });
      throw error;
    }
  }

  private async decodeDialect(request: DecodeRequest): Promise<DecodedRequest & { droppedTools: string[] }> {
    switch (request.dialect) {
      case 'openai.chat':
        return { request: withSession(decodeChatRequest(request.body), request.session), droppedTools: [] };
      case 'anthropic.messages': {
        const { request: canonical, thinking, droppedTools } = decodeMessagesRequest(request.body, this.options);
        return { request: withSession({ ...canonical, showReasoning: thinking }, request.session), droppedTools };
      }
      case 'openai.responses':
        return this.responses.decode(request.body, request.session, this.options);
      default:
        throw new CortexError('not_found', `dialect ${String(request.dialect)} is not served by this translator`);
    }
  }

  @MessagePattern(Subjects.responsesStore)
  async store(payload: { state: ResponsesState; resource: ResponseResource }): Promise<{ stored: boolean }> {
    await this.responses.save(payload.state, payload.resource);
    return { stored: payload.state.store };
  }

  @MessagePattern(Subjects.responsesGet)
  get(payload: IdPayload): Promise<ResponseResource> {
    return this.responses.get(idOf(payload));
  }

  @MessagePattern(Subjects.responsesDelete)
  delete(payload: IdPayload) {
    return this.responses.delete(idOf(payload));
  }

  @MessagePattern(Subjects.responsesInputItems)
  inputItems(payload: IdPayload & { after?: string; limit?: number; order?: 'asc' | 'desc' }) {
    return this.responses.inputItems(idOf(payload), payload);
  }
}

/** A session header names the conversation before the body does. */
function withSession(request: CanonicalRequest, session: string | undefined): CanonicalRequest {
  return session ? { ...request, affinityKey: session } : request;
}

function idOf(payload: IdPayload): string {
  if (typeof payload?.id !== 'string') throw new CortexError('invalid_request', 'id: required', { param: 'id' });
  return payload.id;
}
