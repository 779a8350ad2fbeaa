import type { FastifyInstance } from 'fastify';
import { CortexError } from '@cortex/contracts';
import { sendError } from './error-response.js';
import { requestIdOf } from './request-id.js';

/**
 * How deep a request body may nest. Real requests stay far below (a tool's JSON Schema is the
 * deepest part, a few dozen levels); deeper bodies would overflow the stack of every recursive
 * walk after the parser (JSON.stringify on the bus, the decoders, grammar building in the worker).
 */
export const MAX_BODY_DEPTH = 128;

/** The top-level field under which `value` nests deeper than `limit`, '' for the body itself, or null when it does not. */
export function tooDeep(value: unknown, limit = MAX_BODY_DEPTH): string | null {
  // Iterative on purpose: a recursive walk would overflow on exactly the bodies it is meant to catch.
  const stack: Array<{ value: unknown; depth: number; field: string }> = [{ value, depth: 0, field: '' }];
  for (let next = stack.pop(); next; next = stack.pop()) {
    if (next.value === null || typeof next.value !== 'object') continue;
    if (next.depth >= limit) return next.field;
    const entries = Array.isArray(next.value) ? next.value.map((item, index) => [String(index), item] as const) : Object.entries(next.value);
    for (const [key, item] of entries) stack.push({ value: item, depth: next.depth + 1, field: next.depth === 0 ? key : next.field });
  }
  return null;
}

/** Refuses bodies that nest deeper than MAX_BODY_DEPTH with a 400 in the route's dialect, before any handler runs. */
export function installBodyDepth(fastify: FastifyInstance): void {
  fastify.addHook('preValidation', (request, reply, done) => {
    const field = tooDeep(request.body);
    if (field === null) return done();
    const where = field ? `field \`${field}\`` : 'the request body';
    sendError(reply, request.url, new CortexError('invalid_request', `${where} nests deeper than ${MAX_BODY_DEPTH} levels`, { param: field || undefined }), requestIdOf(request));
  });
}
