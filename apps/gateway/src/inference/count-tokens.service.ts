import { Injectable } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { BusClient } from '@cortex/bus';
import { Subjects, workerSubject, type DecodedRequest, type Dialect, type Placement, type TokenCount } from '@cortex/contracts';
import { sendError, toCortexError } from '../http/error-response.js';
import { requestIdOf } from '../http/request-id.js';
import { InferenceService } from './inference.service.js';

/**
 * Counts prompt tokens with the real tokenizer and chat template: the body is decoded like a
 * generation request, placed like one (loading the model if needed), and the worker renders it.
 */
@Injectable()
export class CountTokensService {
  constructor(
    private readonly inference: InferenceService,
    private readonly bus: BusClient,
  ) {}

  async respond(req: FastifyRequest, reply: FastifyReply, dialect: Dialect, body: unknown, render: (count: TokenCount) => unknown): Promise<void> {
    const requestId = requestIdOf(req);
    try {
      const { request } = await this.bus.request<DecodedRequest>(Subjects.translatorDecode, { dialect, body }, { requestId });
      const placement = await this.bus.request<Placement>(Subjects.routerPlace, { model: request.model, requestId }, {
        requestId,
        timeoutMs: this.inference.config.gateway.placementTimeoutMs,
      });
      const count = await this.bus.request<TokenCount>(workerSubject(Subjects.workerTokenize, placement.workerId), { request: { ...request, model: placement.model } }, { requestId });
      void reply.status(200).header('x-request-id', requestId).send(render(count));
    } catch (error) {
      sendError(reply, req.url, toCortexError(error), requestId);
    }
  }
}
