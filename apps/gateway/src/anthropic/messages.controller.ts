import { Controller, Post, Req, Res } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { InferenceResponder } from '../inference/inference.responder.js';
import { InferenceService } from '../inference/inference.service.js';
import { respondJson } from '../http/error-response.js';
import { anthropicMessagesAdapter } from './messages.adapter.js';
import { contextOf } from '../http/request-context.js';

/** Anthropic Messages, streaming and not, and token counting with the model's real tokenizer. */
@Controller()
export class MessagesController {
  constructor(
    private readonly responder: InferenceResponder,
    private readonly inference: InferenceService,
  ) {}

  @Post(['v1/messages', 'messages'])
  create(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    return this.responder.handle(req, reply, anthropicMessagesAdapter);
  }

  @Post(['v1/messages/count_tokens', 'messages/count_tokens'])
  async countTokens(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    // count_tokens bodies have no max_tokens; the decoder requires one, so supply a placeholder.
    const body = { max_tokens: 1, ...(req.body as object) };
    await respondJson(req, reply, async () => ({
      input_tokens: (await this.inference.countTokens('anthropic.messages', contextOf(req), body)).inputTokens,
    }));
  }
}
