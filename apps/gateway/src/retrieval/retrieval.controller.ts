import { Controller, Post, Req, Res } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import {
  CortexError,
  decodeEmbedResult,
  decodeRankResult,
  Subjects,
  unitLength,
  type EmbedCommand,
  type RankCommand,
} from '@cortex/contracts';
import { respondJson } from '../http/error-response.js';
import { parseEmbeddingsRequest, type EmbeddingsRequest } from './embeddings.request.js';
import { parseRerankRequest } from './rerank.request.js';
import { RetrievalService } from './retrieval.service.js';
import { contextOf } from '../http/request-context.js';

/** OpenAI `/v1/embeddings`, and `/v1/rerank` in the shape llama.cpp's server, Jina and Cohere use. */
@Controller()
export class RetrievalController {
  constructor(private readonly retrieval: RetrievalService) {}

  @Post(['v1/embeddings', 'embeddings'])
  embeddings(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    return respondJson(req, reply, async (requestId) => {
      const request = parseEmbeddingsRequest(req.body);
      this.assertDimensions(request);
      const result = await this.retrieval.run(
        'openai.embeddings',
        contextOf(req),
        { model: request.model, kind: 'embedding' },
        ({ workerId, model }, runId) => {
          const command: EmbedCommand = { runId, model, inputs: request.inputs };
          return this.retrieval.ask(workerId, Subjects.workerEmbed, command, requestId, decodeEmbedResult);
        },
        (r) => r.promptTokens,
        closedSignal(reply),
      );
      const vectors = result.embeddings.map((v) => fitDimensions(v, request.dimensions));
      return {
        object: 'list',
        data: vectors.map((vector, index) => ({
          object: 'embedding',
          index,
          embedding: request.encodingFormat === 'base64' ? toBase64(vector) : vector,
        })),
        model: request.model,
        usage: { prompt_tokens: result.promptTokens, total_tokens: result.promptTokens },
      };
    });
  }

  @Post(['v1/rerank', 'rerank', 'v1/reranking', 'reranking'])
  rerank(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    return respondJson(req, reply, async (requestId) => {
      const request = parseRerankRequest(req.body);
      const result = await this.retrieval.run(
        'rerank',
        contextOf(req),
        { model: request.model, kind: 'ranking' },
        ({ workerId, model }, runId) => {
          const command: RankCommand = { runId, model, query: request.query, documents: request.documents };
          return this.retrieval.ask(workerId, Subjects.workerRank, command, requestId, decodeRankResult);
        },
        (r) => r.promptTokens,
        closedSignal(reply),
      );
      const ranked = result.scores
        .map((score, index) => ({
          index,
          relevance_score: score,
          ...(request.returnDocuments && { document: { text: request.documents[index] } }),
        }))
        .sort((a, b) => b.relevance_score - a.relevance_score || a.index - b.index)
        .slice(0, request.topN ?? result.scores.length);
      return {
        object: 'list',
        model: request.model,
        results: ranked,
        usage: { prompt_tokens: result.promptTokens, total_tokens: result.promptTokens },
      };
    });
  }

  /** `dimensions` only for a model declared Matryoshka-capable: other models' prefixes are not embeddings. */
  private assertDimensions(request: EmbeddingsRequest): void {
    if (request.dimensions === undefined) return;
    const model = this.retrieval.inference.modelConfig(request.model);
    if (model && !model.matryoshka) {
      throw new CortexError(
        'invalid_request',
        `dimensions: the model '${request.model}' returns vectors ` +
          'of one fixed size and cannot shorten them; leave dimensions ' +
          'out (models marked matryoshka: true in the catalogue can)',
        { param: 'dimensions' },
      );
    }
  }
}

/** Aborts when the client goes before the response is written. */
function closedSignal(reply: FastifyReply): AbortSignal {
  const controller = new AbortController();
  reply.raw.on('close', () => {
    if (!reply.raw.writableFinished) controller.abort();
  });
  return controller.signal;
}

/** The first `dimensions` values, renormalized to unit length; the vector itself when none are asked. */
function fitDimensions(vector: number[], dimensions: number | undefined): number[] {
  if (dimensions === undefined) return vector;
  if (dimensions > vector.length) {
    throw new CortexError(
      'invalid_request',
      `dimensions: ${dimensions} is more than the model's ${vector.length}; ask for at most ${vector.length}`,
      { param: 'dimensions' },
    );
  }
  return unitLength(vector.slice(0, dimensions));
}

/** OpenAI's base64 encoding: the float32 values, little-endian, base64. */
function toBase64(vector: number[]): string {
  return Buffer.from(new Float32Array(vector).buffer).toString('base64');
}
