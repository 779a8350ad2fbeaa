import { Controller, Post, Req, Res } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { InferenceResponder } from '../inference/inference.responder.js';
import { InferenceService } from '../inference/inference.service.js';
import { openAiCompletionsAdapter } from './completions.adapter.js';
import { completionFanOut, FanOutRun } from './fan-out-run.js';
import { contextOf } from '../http/request-context.js';

/** Legacy OpenAI Completions (raw prompt, no chat template), streaming and not. */
@Controller()
export class CompletionsController {
  constructor(
    private readonly responder: InferenceResponder,
    private readonly inference: InferenceService,
  ) {}

  @Post(['v1/completions', 'completions'])
  create(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    // Several prompts: one run each, placed and generated side by side, rendered as one response.
    const choices = completionFanOut(req.body);
    const open = choices
      ? () => new FanOutRun(this.inference, 'openai.completions', contextOf(req), choices)
      : undefined;
    return this.responder.handle(req, reply, openAiCompletionsAdapter, open);
  }
}
