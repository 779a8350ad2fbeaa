import { randomBytes } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { REQUEST_ID_HEADER } from '@cortex/contracts';

const SAFE = /^[A-Za-z0-9._:-]{1,128}$/;

/** Ids already handed out, per raw request: the error filter, the logs and the response must all echo one id. */
const assigned = new WeakMap<object, string>();

/** The caller's `x-request-id` when it is sane, else a fresh one; the same id every time for one request. */
export function requestIdOf(request: FastifyRequest): string {
  const known = assigned.get(request.raw);
  if (known !== undefined) return known;
  const given = request.headers[REQUEST_ID_HEADER];
  const id = typeof given === 'string' && SAFE.test(given) ? given : `req_${randomBytes(12).toString('hex')}`;
  assigned.set(request.raw, id);
  return id;
}
