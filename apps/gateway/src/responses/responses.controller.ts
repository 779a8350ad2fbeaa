import { Controller, Delete, Get, Inject, Param, Post, Query, Req, Res } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { BusClient } from '@cortex/bus';
import { CONFIG, type CortexConfig } from '@cortex/config';
import { CortexError, Subjects } from '@cortex/contracts';
import { respondJson } from '../http/error-response.js';
import { InferenceService } from '../inference/inference.service.js';
import type { DialectAdapter } from '../inference/dialect.js';
import { InferenceResponder } from '../inference/inference.responder.js';
import { responsesAdapterFor } from './responses.adapter.js';
import { ResponsesCompactor } from './responses.compact.js';
import { BackgroundResponder } from './responses.background.js';
import { contextOf } from '../http/request-context.js';
import { McpLoops } from '../mcp/mcp-loops.js';
import { hasMcpTools } from '../mcp/mcp-request.js';

/**
 * OpenResponses / OpenAI Responses: create (streaming and not), retrieve, delete, cancel, input items, input tokens,
 * compact, background runs.
 */
@Controller()
export class ResponsesController {
  private readonly adapter: DialectAdapter;
  private readonly compactor: ResponsesCompactor;

  constructor(
    private readonly responder: InferenceResponder,
    private readonly inference: InferenceService,
    private readonly bus: BusClient,
    private readonly background: BackgroundResponder,
    private readonly loops: McpLoops,
    @Inject(CONFIG) private readonly config: CortexConfig,
  ) {
    this.adapter = responsesAdapterFor(bus, config);
    this.compactor = new ResponsesCompactor(inference);
  }

  @Post(['v1/responses', 'responses'])
  create(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    const background = (req.body as { background?: unknown } | null)?.background === true;
    if (hasMcpTools(req.body)) {
      if (background)
        return respondJson(req, reply, () => {
          throw new CortexError(
            'invalid_request',
            'background: a response with mcp tools runs in the foreground here; leave background out',
            { param: 'background' },
          );
        });
      return this.responder.handle(req, reply, this.adapter, () => this.loops.responses(contextOf(req)));
    }
    if (background) return this.background.create(req, reply);
    return this.responder.handle(req, reply, this.adapter);
  }

  @Post(['v1/responses/compact', 'responses/compact'])
  compact(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    return respondJson(req, reply, (requestId) => this.compactor.compact(req, reply, requestId));
  }

  @Post(['v1/responses/input_tokens', 'responses/input_tokens'])
  inputTokens(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    return respondJson(req, reply, async () => ({
      object: 'response.input_tokens',
      input_tokens: (await this.inference.countTokens('openai.responses', contextOf(req), req.body)).inputTokens,
    }));
  }

  @Get(['v1/responses/:id', 'responses/:id'])
  get(
    @Req() req: FastifyRequest,
    @Res() reply: FastifyReply,
    @Param('id') id: string,
    @Query() query: { stream?: string; starting_after?: string },
  ): Promise<void> {
    if (query.stream === 'true') return this.background.stream(req, reply, id, query.starting_after);
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
    return respondJson(req, reply, (requestId) => {
      const { order, after } = query;
      if (order !== undefined && order !== 'asc' && order !== 'desc')
        throw new CortexError('invalid_request', "order: must be 'asc' or 'desc'", { param: 'order' });
      const limit = query.limit === undefined ? undefined : Number(query.limit);
      return this.bus.request(Subjects.responsesInputItems, { id, after, limit, order }, { requestId });
    });
  }

  /** Stops a background response on its worker; others cannot be cancelled. */
  @Post(['v1/responses/:id/cancel', 'responses/:id/cancel'])
  cancel(@Req() req: FastifyRequest, @Res() reply: FastifyReply, @Param('id') id: string): Promise<void> {
    return respondJson(req, reply, (requestId) => this.background.cancel(id, requestId));
  }

  private relay(req: FastifyRequest, reply: FastifyReply, subject: string, payload: unknown): Promise<void> {
    return respondJson(req, reply, (requestId) => this.bus.request(subject, payload, { requestId }));
  }
}
