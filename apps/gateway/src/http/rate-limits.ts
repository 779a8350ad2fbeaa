import type { FastifyInstance, FastifyReply } from 'fastify';
import { goDuration, type RequestWindow } from '../limits/rate-limit.decider.js';
import type { TokenWindow } from '../limits/token-rate.decider.js';
import type { KeyAdmission } from '../limits/key-admission.js';
import { sendError } from './error-response.js';
import { requestPath } from './request-path.js';
import { contextOf } from './request-context.js';

/** The routes that start work on a worker: each request counts against its key's limits. */
export const LIMITED =
  /^\/(v1\/)?(chat\/completions|completions|responses|responses\/compact|messages|messages\/count_tokens|embeddings|rerank|reranking)$/;
const MESSAGES = /^\/(v1\/)?messages(\/|$)/;

/**
 * The limits of stored keys (limits/key-admission.ts), checked once the body has passed the key and
 * model checks. An admitted request holds its concurrency lease and budget reservation until its
 * response closes — finished, failed, or the client gone — and the reservation is then settled with
 * its usage. The limit headers are set on the raw response, so a stream (which writes its own head)
 * sends them before its first byte too.
 */
export function installRateLimits(fastify: FastifyInstance, admission: KeyAdmission): void {
  fastify.addHook('preValidation', (request, reply, done) => {
    const principal = contextOf(request).principal;
    const path = requestPath(request);
    if (!principal || request.method !== 'POST' || !LIMITED.test(path)) return done();
    const anthropic = MESSAGES.test(path);
    void (async () => {
      const bytes = Number(request.headers['content-length']) || Buffer.byteLength(JSON.stringify(request.body ?? {}));
      const background = (request.body as { background?: unknown } | null)?.background === true;
      const decision = await admission.admit({
        key: principal.key,
        requestId: contextOf(request).id,
        meter: contextOf(request).meter,
        path,
        body: request.body,
        bytes,
        background,
      });
      if (decision.requests) setWindowHeaders(reply, decision.requests, anthropic);
      if (decision.tokens) setTokenHeaders(reply, decision.tokens, anthropic);
      if (decision.kind === 'refuse') {
        // Spent: retrying does not help until the budget resets or is raised; the official SDKs read this header.
        if (decision.retryAfterMs === null) reply.raw.setHeader('x-should-retry', 'false');
        else reply.raw.setHeader('retry-after-ms', String(decision.retryAfterMs));
        sendError(reply, request.url, decision.error, contextOf(request).id);
        return;
      }
      // The client may have left during the round trips above: its 'close' has been and gone.
      // (The request stream itself is destroyed once its body has been read: the socket is what says.)
      if (reply.raw.destroyed || request.raw.socket?.destroyed) {
        decision.done();
        return;
      }
      reply.raw.once('close', decision.done);
      done();
    })();
  });
}

/** OpenAI's `x-ratelimit-*-requests` (reset as `6m0s`), or Anthropic's `anthropic-ratelimit-requests-*` (reset as an RFC 3339 time). */
export function windowHeaders(window: RequestWindow, anthropic: boolean, now = Date.now()): Record<string, string> {
  if (anthropic) {
    const reset = new Date(Math.ceil((now + window.resetMs) / 1_000) * 1_000).toISOString().replace('.000Z', 'Z');
    return {
      'anthropic-ratelimit-requests-limit': String(window.limit),
      'anthropic-ratelimit-requests-remaining': String(window.remaining),
      'anthropic-ratelimit-requests-reset': reset,
    };
  }
  return {
    'x-ratelimit-limit-requests': String(window.limit),
    'x-ratelimit-remaining-requests': String(window.remaining),
    'x-ratelimit-reset-requests': goDuration(window.resetMs),
  };
}

function setWindowHeaders(reply: FastifyReply, window: RequestWindow, anthropic: boolean): void {
  for (const [name, value] of Object.entries(windowHeaders(window, anthropic))) reply.raw.setHeader(name, value);
}

/**
 * OpenAI's `x-ratelimit-*-tokens`, or Anthropic's `anthropic-ratelimit-tokens-*`; a cortex
 * `tokens_per_minute` counts input and output together, so Anthropic's `input-tokens-*` and
 * `output-tokens-*` report the same window.
 */
export function tokenHeaders(window: TokenWindow, anthropic: boolean, now = Date.now()): Record<string, string> {
  if (anthropic) {
    const reset = new Date(Math.ceil((now + window.resetMs) / 1_000) * 1_000).toISOString().replace('.000Z', 'Z');
    const headers: Record<string, string> = {};
    for (const kind of ['tokens', 'input-tokens', 'output-tokens']) {
      headers[`anthropic-ratelimit-${kind}-limit`] = String(window.limit);
      headers[`anthropic-ratelimit-${kind}-remaining`] = String(window.remaining);
      headers[`anthropic-ratelimit-${kind}-reset`] = reset;
    }
    return headers;
  }
  return {
    'x-ratelimit-limit-tokens': String(window.limit),
    'x-ratelimit-remaining-tokens': String(window.remaining),
    'x-ratelimit-reset-tokens': goDuration(window.resetMs),
  };
}

function setTokenHeaders(reply: FastifyReply, window: TokenWindow, anthropic: boolean): void {
  for (const [name, value] of Object.entries(tokenHeaders(window, anthropic))) reply.raw.setHeader(name, value);
}
