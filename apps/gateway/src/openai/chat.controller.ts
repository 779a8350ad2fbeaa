import { Controller, Post, Req, Res } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { InferenceResponder } from '../inference/inference.responder.js';
import { openAiChatAdapter } from './chat.adapter.js';

/** OpenAI Chat Completions, streaming and not. */
@Controller()
export class ChatController {
  constructor(private readonly responder: InferenceResponder) {}

  @Post(['v1/chat/completions', 'chat/completions'])
  create(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    return this.responder.handle(req, reply, openAiChatAdapter);
  }
}
