import type { FastifyRequest } from 'fastify';
import type { KeyPrincipal } from '../keys/key-directory.js';

// Keyed by the raw request, which every hook and controller of one request shares.
const principals = new WeakMap<object, KeyPrincipal>();

/** Marks a request as made with a stored key (http/access.ts does, once the key is checked). */
export function setPrincipal(request: FastifyRequest, principal: KeyPrincipal): void {
  principals.set(request.raw, principal);
}

/** The stored key a request was made with; undefined for a config-file key or no key. */
export function principalOf(request: FastifyRequest): KeyPrincipal | undefined {
  return principals.get(request.raw);
}
