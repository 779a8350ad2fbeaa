import { Controller, Delete, Get, Inject, Param, Post, Query, Req, Res } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { BusClient } from '@cortex/bus';
import { CONFIG, type CortexConfig } from '@cortex/config';
import { CortexError, Subjects } from '@cortex/contracts';
import { sendError, toCortexError } from '../http/error-response.js';
import { requestIdOf } from '../http/request-id.js';
import { CountTokensService } from '../inference/count-tokens.service.js';
import type { DialectAdapter } from '../inference/dialect.js';
import { InferenceResponder } from '../inference/inference.responder.js';
import { responsesAdapter } from './responses.adapter.js';

/** OpenResponses / OpenAI Responses: create (streaming and not), retrieve, delete, cancel, input items, input tokens. */
@Controller()
export class ResponsesController {
  private readonly adapter: DialectAdapter;

  constructor(
    private readonly responder: InferenceResponder,
    private readonly counter: CountTokensService,
    private readonly bus: BusClient,
    @Inject(CONFIG) config: CortexConfig,
  ) {
    this.adapter = responsesAdapter(bus, config.responses.reasoningEvents);
  }

  @Post(['v1/responses', 'responses'])
  create(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    return this.responder.handle(req, reply, this.adapter);
  }

  @Post(['v1/responses/input_tokens', 'responses/input_tokens'])
  inputTokens(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    return this.counter.respond(req, reply, 'openai.responses', req.body, (count) => ({ object: 'response.input_tokens', input_tokens: count.inputTokens }));
  }

  @Get(['v1/responses/:id', 'responses/:id'])
  get(@Req() req: FastifyRequest, @Res() reply: FastifyReply, @Param('id') id: string): Promise<void> {
    return this.relay(req, reply, Subjects.responsesGet, { id });
  }

  @Delete(['v1/responses/:id', 'responses/:id'])
  delete(@Req() req: FastifyRequest, @Res() reply: FastifyReply, @Param('id') id: string): Promise<void> {
    return this.relay(req, reply, Subjects.responsesDelete, { id });
  }

  @Get(['v1/responses/:id/input_items', 'responses/:id/input_items'])
  inputItems(
    @Req() req: FastifyRequest,
    @Res() reply: FastifyReply,
    @Param('id') id: string,
    @Query() query: { after?: string; limit?: string; order?: string },
  ): Promise<void> {
    const order = query.order === undefined ? undefined : query.order === 'asc' || query.order === 'desc' ? query.order : 'invalid';
    if (order === 'invalid') return Promise.resolve(sendError(reply, req.url, new CortexError('invalid_request', "order: must be 'asc' or 'desc'", { param: 'order' }), requestIdOf(req)));
    const limit = query.limit === undefined ? undefined : Number(query.limit);
    return this.relay(req, reply, Subjects.responsesInputItems, { id, after: query.after, limit, order });
  }

  /** Only background responses can be cancelled, and cortex runs none: say so for stored ones. */
  @Post(['v1/responses/:id/cancel', 'responses/:id/cancel'])
  async cancel(@Req() req: FastifyRequest, @Res() reply: FastifyReply, @Param('id') id: string): Promise<void> {
    const requestId = requestIdOf(req);
    try {
      await this.bus.request(Subjects.responsesGet, { id }, { requestId });
      throw new CortexError('invalid_request', `Response ${id} is not a background response; only background responses can be cancelled`, { param: 'response_id' });
    } catch (error) {
      sendError(reply, req.url, toCortexError(error), requestId);
    }
  }

  private async relay(req: FastifyRequest, reply: FastifyReply, subject: string, payload: unknown): Promise<void> {
    const requestId = requestIdOf(req);
    try {
      void reply.status(200).header('x-request-id', requestId).send(await this.bus.request(subject, payload, { requestId }));
    } catch (error) {
      sendError(reply, req.url, toCortexError(error), requestId);
    }
  }
}
