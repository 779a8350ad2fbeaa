import { Controller, Logger, Post, Req, Res } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { CortexError, type StreamEvent } from '@cortex/contracts';
import { ChatChunkEncoder, ChatCompletionAggregator, openAiError } from '@cortex/wire';
import { InferenceService, type InferenceRun } from '../inference/inference.service.js';
import { sendError, toCortexError } from '../http/error-response.js';
import { requestIdOf } from '../http/request-id.js';
import { SseWriter } from '../http/sse.writer.js';

/** OpenAI Chat Completions, streaming and not. */
@Controller()
export class ChatController {
  private readonly logger = new Logger('chat');

  constructor(private readonly inference: InferenceService) {}

  @Post(['v1/chat/completions', 'chat/completions'])
  async create(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    const requestId = requestIdOf(req);
    const run = this.inference.open('openai.chat', requestId);
    reply.raw.on('close', () => {
      if (!reply.raw.writableFinished) run.cancel('client disconnected');
    });
    const sse = new SseWriter(reply, requestId);
    try {
      const request = await run.decode(req.body);
      const meta = { id: `chatcmpl-${run.runId}`, model: request.model, created: Math.floor(run.startedAt / 1000) };
      if (request.stream) await this.stream(run, sse, new ChatChunkEncoder({ ...meta, includeUsage: request.includeUsage ?? false }));
      else await this.complete(run, reply, new ChatCompletionAggregator(meta), requestId);
    } catch (thrown) {
      const error = toCortexError(thrown);
      run.fail(error);
      if (error.code === 'internal') this.logger.error(`${requestId}: ${error.message}`);
      if (sse.isStarted) {
        sse.data(openAiError(error.toBody()));
        sse.done();
      } else if (!reply.sent) {
        sendError(reply, req.url, error, requestId);
      }
    } finally {
      run.finish();
    }
  }

  private async stream(run: InferenceRun, sse: SseWriter, encoder: ChatChunkEncoder): Promise<void> {
    // While a model loads, keep the connection visibly alive with comment frames.
    const keepAlive = setInterval(() => sse.comment('keep-alive'), this.inference.config.gateway.keepAliveMs);
    try {
      const events = await run.start();
      for await (const event of events) {
        if (event.type === 'error') throw CortexError.fromBody(event.error);
        if (!sse.isStarted && event.type !== 'keepalive') sse.start();
        run.headersSent = sse.isStarted;
        for (const chunk of encoder.encode(event)) sse.data(chunk);
      }
      if (sse.closed) return;
      sse.done();
    } finally {
      clearInterval(keepAlive);
    }
  }

  private async complete(run: InferenceRun, reply: FastifyReply, aggregator: ChatCompletionAggregator, requestId: string): Promise<void> {
    const events: AsyncIterable<StreamEvent> = await run.start();
    for await (const event of events) {
      if (event.type === 'error') throw CortexError.fromBody(event.error);
      aggregator.add(event);
    }
    if (reply.raw.destroyed) return;
    void reply.status(200).header('x-request-id', requestId).type('application/json').send(aggregator.body());
  }
}
