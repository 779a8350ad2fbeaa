import { Controller, Post, Req, Res } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { CortexError } from '@cortex/contracts';
import { InferenceResponder } from '../inference/inference.responder.js';
import { InferenceService } from '../inference/inference.service.js';
import { respondJson } from '../http/error-response.js';
import { anthropicMessagesAdapter } from './messages.adapter.js';
import { contextOf } from '../http/request-context.js';
import { McpLoops } from '../mcp/mcp-loops.js';
import { ANTHROPIC_MCP_BETAS, hasMcpServers } from '../mcp/mcp-request.js';

/** Anthropic Messages, streaming and not, and token counting with the model's real tokenizer. */
@Controller()
export class MessagesController {
  constructor(
    private readonly responder: InferenceResponder,
    private readonly inference: InferenceService,
    private readonly loops: McpLoops,
  ) {}

  @Post(['v1/messages', 'messages'])
  create(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    if (!hasMcpServers(req.body)) return this.responder.handle(req, reply, anthropicMessagesAdapter);
    // As at Anthropic, the MCP connector is a beta the request opts into.
    const betas = String(req.headers['anthropic-beta'] ?? '')
      .split(',')
      .map((beta) => beta.trim());
    if (!ANTHROPIC_MCP_BETAS.some((beta) => betas.includes(beta)))
      return respondJson(req, reply, () => {
        throw new CortexError(
          'invalid_request',
          `mcp_servers: Anthropic's MCP connector is a beta; send the header anthropic-beta: ${ANTHROPIC_MCP_BETAS[0]}`,
          { param: 'mcp_servers' },
        );
      });
    return this.responder.handle(req, reply, anthropicMessagesAdapter, () => this.loops.messages(contextOf(req)));
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
