import type { FastifyReply, FastifyRequest } from 'fastify';
import { CortexError, type ErrorBody } from '@cortex/contracts';
import { anthropicError, openAiError } from '@cortex/wire';
import { contextOf } from './request-context.js';

/** Any thrown value → a CortexError (unknown errors become `internal`, their message kept). */
export function toCortexError(error: unknown): CortexError {
  if (error instanceof CortexError) return error;
  const status = (error as { statusCode?: number }).statusCode;
  const message = error instanceof Error ? error.message : String(error);
  if (status === 404) return new CortexError('not_found', message);
  if (status === 413) return new CortexError('payload_too_large', `request body is too large: ${message}`);
  if (status === 415) return new CortexError('invalid_request', `${message}; send Content-Type: application/json`);
  if (status !== undefined && status >= 400 && status < 500) return new CortexError('invalid_request', message);
  return new CortexError('internal', message, { cause: error });
}

/** The error body in the dialect of the route that was called. */
export function dialectErrorBody(url: string, error: ErrorBody): unknown {
  return /^\/(v1\/)?messages(\/|\?|$)/.test(url) ? anthropicError(error) : openAiError(error);
}

export function sendError(reply: FastifyReply, url: string, error: CortexError, requestId: string): void {
  const body = error.toBody();
  reply.header('x-request-id', requestId);
  if (body.retryAfter !== undefined) reply.header('retry-after', String(body.retryAfter));
  void reply.status(error.status).type('application/json').send(dialectErrorBody(url, body));
}

/**
 * Answers a plain JSON route: 200 with what `body` returns, or the error it throws in the route's
 * dialect; `x-request-id` either way.
 */
export async function respondJson(
  req: FastifyRequest,
  reply: FastifyReply,
  body: (requestId: string) => Promise<unknown>,
): Promise<void> {
  const requestId = contextOf(req).id;
  try {
    const result = await body(requestId);
    void reply.status(200).header('x-request-id', requestId).type('application/json').send(result);
  } catch (error) {
    sendError(reply, req.url, toCortexError(error), requestId);
  }
}
