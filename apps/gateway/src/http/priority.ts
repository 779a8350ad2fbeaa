import type { FastifyInstance } from 'fastify';
import type { CortexConfig } from '@cortex/config';
import { PRIORITY_HEADER } from '@cortex/contracts';
import { priorityFor, type Caller } from '../priority/priority.decider.js';
import { sendError, toCortexError } from './error-response.js';
import { requestPath } from './request-path.js';
import { LIMITED } from './rate-limits.js';
import { contextOf } from './request-context.js';

/** A Responses WebSocket: its upgrade's tier is its turns' (a stored key's turns take the key's tier at each turn, see TurnAdmission). */
const SOCKET = /^\/(v1\/)?responses$/;

/**
 * Gives every request that runs on a worker its tier and account (priority/priority.decider.ts): a
 * stored key's tier, a config-file key's default tier, or the lowest without a key, lowered by the
 * `x-cortex-priority` header. Runs before the limits, so a bad header is a 400 that spends nothing.
 */
export function installPriority(fastify: FastifyInstance, config: CortexConfig): void {
  const configKeys = config.auth.mode === 'keys' && config.auth.apiKeys.length + config.auth.adminKeys.length > 0;
  fastify.addHook('preValidation', (request, reply, done) => {
    const path = requestPath(request);
    const socket = request.method === 'GET' && SOCKET.test(path);
    if (!socket && (request.method !== 'POST' || !LIMITED.test(path))) return done();
    const context = contextOf(request);
    const principal = context.principal;
    // Past the access check, a request without a stored key either presented a config-file key or needed none.
    const caller: Caller = principal
      ? { kind: 'stored', key: principal.key }
      : configKeys
        ? { kind: 'config' }
        : { kind: 'none' };
    try {
      context.prioritize(priorityFor(caller, request.headers[PRIORITY_HEADER]));
    } catch (error) {
      sendError(reply, request.url, toCortexError(error), context.id);
      return;
    }
    done();
  });
}
