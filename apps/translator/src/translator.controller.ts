import { Controller, Inject, Logger } from '@nestjs/common';
import { Ctx, MessagePattern, Payload } from '@nestjs/microservices';
import type { BusContext } from '@cortex/bus';
import { CONFIG, type CortexConfig } from '@cortex/config';
import {
  CortexError,
  decodeInputItems,
  decodeDecodeRequest,
  type DecodeRequest,
  decodeResponseId,
  Subjects,
  type DecodedRequest,
} from '@cortex/contracts';
import {
  decodeBody,
  decodeSocketTurn,
  decodeStoreCommand,
  type DecodeOptions,
  type ResponseResource,
} from '@cortex/wire';
import { ResponsesService, type CompactionPlan } from './responses/responses.service.js';
import { BackgroundResponses, type BackgroundState } from './responses/responses.background.js';

/** Dialect bodies → the canonical request, and the Responses API's stored state. */
@Controller()
export class TranslatorController {
  private readonly logger = new Logger('translator');

  private readonly options: DecodeOptions;

  constructor(
    private readonly responses: ResponsesService,
    private readonly background: BackgroundResponses,
    @Inject(CONFIG) config: CortexConfig,
  ) {
    this.options = { hostedTools: config.gateway.hostedTools };
  }

  @MessagePattern(Subjects.translatorDecode)
  async decode(@Payload() payload: unknown, @Ctx() context: BusContext): Promise<DecodedRequest> {
    const request = decodeDecodeRequest(payload);
    try {
      const { droppedTools, ...decoded } = await this.decodeDialect(request);
      if (droppedTools.length > 0) {
        this.logger.log({
          msg: `dropped tools the model cannot run: ${droppedTools.join(', ')}`,
          requestId: context.requestId,
          dialect: request.dialect,
        });
      }
      this.logger.log({
        msg: `decoded ${request.dialect} for ${decoded.request.model}`,
        requestId: context.requestId,
        messages: decoded.request.messages.length,
        stream: decoded.request.stream,
      });
      return decoded;
    } catch (error) {
      this.logger.log({
        msg: `rejected ${request.dialect}: ${(error as Error).message}`,
        requestId: context.requestId,
      });
      throw error;
    }
  }

  private async decodeDialect(request: DecodeRequest): Promise<DecodedRequest & { droppedTools: string[] }> {
    // Gateways decode these bodies themselves; this answers gateways from before that.
    const decoded = decodeBody(request.dialect, request.body, request.session, this.options);
    if (decoded) return decoded;
    if (request.dialect === 'openai.responses')
      return this.responses.decode(
        request.body,
        request.session,
        this.options,
        request.socket && decodeSocketTurn(request.socket),
      );
    throw new CortexError('not_found', `dialect ${String(request.dialect)} is not served by this translator`);
  }

  // The Responses handlers decode their payloads like `decode` does: a bad one is `invalid_request`
  // naming the field, never a TypeError deep in the store.
  @MessagePattern(Subjects.responsesStore)
  async store(@Payload() payload: unknown): Promise<{ stored: boolean }> {
    const { state, resource } = decodeStoreCommand(payload);
    await this.responses.save(state, resource);
    return { stored: state.store };
  }

  @MessagePattern(Subjects.responsesCompaction)
  compaction(@Payload() payload: unknown): Promise<CompactionPlan> {
    const request = decodeDecodeRequest(payload);
    return this.responses.compaction(request.body, request.session);
  }

  @MessagePattern(Subjects.responsesGet)
  async get(@Payload() payload: unknown): Promise<ResponseResource> {
    return (await this.background.state(decodeResponseId(payload).id)).resource;
  }

  @MessagePattern(Subjects.responsesBackground)
  backgroundState(@Payload() payload: unknown): Promise<BackgroundState> {
    return this.background.state(decodeResponseId(payload).id);
  }

  @MessagePattern(Subjects.responsesDelete)
  delete(@Payload() payload: unknown) {
    return this.responses.delete(decodeResponseId(payload).id);
  }

  @MessagePattern(Subjects.responsesInputItems)
  inputItems(@Payload() payload: unknown) {
    const { id, ...page } = decodeInputItems(payload);
    return this.responses.inputItems(id, page);
  }
}
