import { randomBytes } from 'node:crypto';
import type { FastifyRequest } from 'fastify';

const SAFE = /^[A-Za-z0-9._:-]{1,128}$/;

/** The caller's `x-request-id` when it is sane, else a fresh one; echoed on every response. */
export function requestIdOf(request: FastifyRequest): string {
  const given = request.headers['x-request-id'];
  if (typeof given === 'string' && SAFE.test(given)) return given;
  return `req_${randomBytes(12).toString('hex')}`;
}
