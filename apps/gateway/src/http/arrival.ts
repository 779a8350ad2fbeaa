import { performance } from 'node:perf_hooks';
import type { FastifyInstance, FastifyRequest } from 'fastify';

/** When each request arrived (performance.now()), by raw request: the first hop of time to first byte. */
const arrivals = new WeakMap<object, number>();

export function installArrival(fastify: FastifyInstance): void {
  fastify.addHook('onRequest', (request, _reply, done) => {
    arrivals.set(request.raw, performance.now());
    done();
  });
}

/** The request's arrival, or now for one that did not pass the hook. */
export function arrivalOf(request: FastifyRequest): number {
  return arrivals.get(request.raw) ?? performance.now();
}
