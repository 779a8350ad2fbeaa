import type { FastifyInstance, FastifyReply } from 'fastify';
import { goDuration, type RequestWindow } from '../limits/rate-limit.decider.js';
import type { RateLimiter } from '../limits/rate-limiter.js';
import type { TokenRateLimiter } from '../limits/token-rate-limiter.js';
import type { TokenWindow } from '../limits/token-rate.decider.js';
import { BACKGROUND_USAGE_WAIT_MS, USAGE_WAIT_MS, type BudgetLedger } from '../limits/budget-ledger.js';
import { reservationFor } from '../limits/reservation.js';
import type { KeyDirectory } from '../keys/key-directory.js';
import type { UsageRecorder } from '../usage/usage-recorder.js';
import { CortexError } from '@cortex/contracts';
import { sendError } from './error-response.js';
import { principalOf } from './principal.js';
import { requestIdOf } from './request-id.js';
import { requestPath } from './request-path.js';

/** The routes that start work on a worker: each request counts against its key's limits. */
export const LIMITED = /^\/(v1\/)?(chat\/completions|completions|responses|responses\/compact|messages|messages\/count_tokens|embeddings|rerank|reranking)$/;
const MESSAGES = /^\/(v1\/)?messages(\/|$)/;

/**
 * The limits of stored keys, checked once the body has passed the key and model checks: first the
 * request windows (limits/rate-limiter.ts), then tokens per minute (limits/token-rate-limiter.ts),
 * then the token budgets (limits/budget-ledger.ts); the last two reserve the request's bound
 * (limits/reservation.ts) and settle with the usage it reports. An
 * admitted request holds its concurrency lease and budget reservation until its response closes —
 * finished, failed, or the client gone — and the reservation is then settled with its usage. The
 * request is attributed to its key and account for its usage records (usage/usage-recorder.ts). The
 * limit headers are set on the raw response, so a stream (which writes its own head) sends them
 * before its first byte too.
 */
export function installRateLimits(fastify: FastifyInstance, deps: { limiter: RateLimiter; tokens: TokenRateLimiter; budgets: BudgetLedger; directory: KeyDirectory; usage: UsageRecorder; contextSizeOf: (model: string) => number | undefined }): void {
  fastify.addHook('preValidation', (request, reply, done) => {
    const principal = principalOf(request);
    const path = requestPath(request);
    if (!principal || request.method !== 'POST' || !LIMITED.test(path)) return done();
    const anthropic = MESSAGES.test(path);
    const { key } = principal;
    const account = deps.directory.account(key.account);
    void (async () => {
      const rate = await deps.limiter.admit(key, account);
      if (rate.requests) setWindowHeaders(reply, rate.requests, anthropic);
      if (rate.kind === 'refuse') {
        reply.raw.setHeader('retry-after-ms', String(rate.retryAfterMs));
        sendError(reply, request.url, rate.error, requestIdOf(request));
        return;
      }
      const model = (request.body as { model?: unknown } | null)?.model;
      const bytes = Number(request.headers['content-length']) || Buffer.byteLength(JSON.stringify(request.body ?? {}));
      const tokens = reservationFor(path, request.body, bytes, typeof model === 'string' ? deps.contextSizeOf(model) : undefined);
      const perMinute = await deps.tokens.admit(key, account, tokens).catch(async (error: unknown) => {
        await rate.release();
        throw error;
      });
      if (perMinute.window) setTokenHeaders(reply, perMinute.window, anthropic);
      if (perMinute.kind === 'refuse') {
        await rate.release();
        reply.raw.setHeader('retry-after-ms', String(perMinute.retryAfterMs));
        sendError(reply, request.url, perMinute.error, requestIdOf(request));
        return;
      }
      const budget = await deps.budgets.reserve(key, account, requestIdOf(request), tokens, perMinute.window !== null).catch(async (error: unknown) => {
        await Promise.all([rate.release(), perMinute.settle(0)]);
        throw error;
      });
      if (budget.kind === 'refuse') {
        await Promise.all([rate.release(), perMinute.settle(0)]);
        // Spent: retrying does not help until the budget resets or is raised; the official SDKs read this header.
        if (budget.retryAfterMs === null) reply.raw.setHeader('x-should-retry', 'false');
        else reply.raw.setHeader('retry-after-ms', String(budget.retryAfterMs));
        sendError(reply, request.url, budget.error, requestIdOf(request));
        return;
      }
      const background = (request.body as { background?: unknown } | null)?.background === true;
      // Its usage records are billed to this key and account.
      const owner = deps.usage.attribute(requestIdOf(request), { account: key.account, keyId: key.id });
      const release = (): void => {
        void rate.release();
        owner.forget(2 * (background ? BACKGROUND_USAGE_WAIT_MS : USAGE_WAIT_MS));
        // A background response answers at once and runs on: its usage comes when the run ends.
        void budget.settle(background ? BACKGROUND_USAGE_WAIT_MS : USAGE_WAIT_MS).then((used) => perMinute.settle(used));
      };
      // The client may have left during the round trips above: its 'close' has been and gone.
      // (The request stream itself is destroyed once its body has been read: the socket is what says.)
      if (reply.raw.destroyed || request.raw.socket?.destroyed) {
        release();
        return;
      }
      reply.raw.once('close', release);
      done();
    })().catch((error: unknown) => {
      // NATS unreachable: never let a limited key through unlimited, never a 500.
      const refusal =
        error instanceof CortexError ? error : new CortexError('service_unavailable', `the key's limits cannot be checked now (${(error as Error).message}); retry`, { retryAfter: 1, cause: error });
      sendError(reply, request.url, refusal, requestIdOf(request));
    });
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
  return { 'x-ratelimit-limit-tokens': String(window.limit), 'x-ratelimit-remaining-tokens': String(window.remaining), 'x-ratelimit-reset-tokens': goDuration(window.resetMs) };
}

function setTokenHeaders(reply: FastifyReply, window: TokenWindow, anthropic: boolean): void {
  for (const [name, value] of Object.entries(tokenHeaders(window, anthropic))) reply.raw.setHeader(name, value);
}
