import { Controller, Post, Req, Res } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { InferenceResponder } from '../inference/inference.responder.js';
import { InferenceService } from '../inference/inference.service.js';
import { chatFanOut, FanOutRun } from '../completions/fan-out-run.js';
import { openAiChatAdapter } from './chat.adapter.js';
import { contextOf } from '../http/request-context.js';

/** OpenAI Chat Completions, streaming and not; `n` choices run as requests of their own, side by side. */
@Controller()
export class ChatController {
  constructor(
    private readonly responder: InferenceResponder,
    private readonly inference: InferenceService,
  ) {}

  @Post(['v1/chat/completions', 'chat/completions'])
  create(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    const choices = chatFanOut(req.body);
    const open = choices ? () => new FanOutRun(this.inference, 'openai.chat', contextOf(req), choices) : undefined;
    return this.responder.handle(req, reply, openAiChatAdapter, open);
  }
}
