import type { FastifyInstance, FastifyReply } from 'fastify';
import { goDuration, type RequestWindow } from '../limits/rate-limit.decider.js';
import type { RateLimiter } from '../limits/rate-limiter.js';
import type { KeyDirectory } from '../keys/key-directory.js';
import { CortexError } from '@cortex/contracts';
import { sendError } from './error-response.js';
import { principalOf } from './principal.js';
import { requestIdOf } from './request-id.js';

/** The routes that start work on a worker: each request counts against its key's limits. */
const LIMITED = /^\/(v1\/)?(chat\/completions|completions|responses|responses\/compact|messages|messages\/count_tokens|embeddings|rerank|reranking)$/;
const MESSAGES = /^\/(v1\/)?messages(\/|$)/;

/**
 * The rate limits of stored keys (limits/rate-limiter.ts), checked once the body has passed the key
 * and model checks. An admitted request holds its concurrency lease until its response closes —
 * finished, failed, or the client gone. The limit headers are set on the raw response, so a stream
 * (which writes its own head) sends them before its first byte too.
 */
export function installRateLimits(fastify: FastifyInstance, limiter: RateLimiter, directory: KeyDirectory): void {
  fastify.addHook('preValidation', (request, reply, done) => {
    const principal = principalOf(request);
    if (!principal || request.method !== 'POST' || !LIMITED.test(request.url.split('?')[0] ?? '')) return done();
    const anthropic = MESSAGES.test(request.url);
    limiter.admit(principal.key, directory.account(principal.key.account)).then(
      (result) => {
        if (result.requests) setWindowHeaders(reply, result.requests, anthropic);
        if (result.kind === 'refuse') {
          reply.raw.setHeader('retry-after-ms', String(result.retryAfterMs));
          sendError(reply, request.url, result.error, requestIdOf(request));
          return;
        }
        reply.raw.once('close', () => void result.release());
        done();
      },
      // NATS unreachable: never let a limited key through unlimited, never a 500.
      (error: unknown) => {
        const refusal =
          error instanceof CortexError ? error : new CortexError('service_unavailable', `the key's rate limits cannot be checked now (${(error as Error).message}); retry`, { retryAfter: 1, cause: error });
        sendError(reply, request.url, refusal, requestIdOf(request));
      },
    );
  });
}

/** OpenAI's `x-ratelimit-*-requests` (reset as `6m0s`), or Anthropic's `anthropic-ratelimit-requests-*` (reset as an RFC 3339 time). */
export function windowHeaders(window: RequestWindow, anthropic: boolean, now = Date.now()): Record<string, string> {
  if (anthropic) {
    const reset = new Date(Math.ceil((now + window.resetMs) / 1_000) * 1_000).toISOString().replace('.000Z', 'Z');
    return { 'anthropic-ratelimit-requests-limit': String(window.limit), 'anthropic-ratelimit-requests-remaining': String(window.remaining), 'anthropic-ratelimit-requests-reset': reset };
  }
  return { 'x-ratelimit-limit-requests': String(window.limit), 'x-ratelimit-remaining-requests': String(window.remaining), 'x-ratelimit-reset-requests': goDuration(window.resetMs) };
}

function setWindowHeaders(reply: FastifyReply, window: RequestWindow, anthropic: boolean): void {
  for (const [name, value] of Object.entries(windowHeaders(window, anthropic))) reply.raw.setHeader(name, value);
}
