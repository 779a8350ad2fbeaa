import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { REQUEST_ID_HEADER, type RequestPriority } from '@cortex/contracts';
import type { IncomingHeaders } from '../inference/run-trace.js';
import type { KeyPrincipal } from '../keys/key-directory.js';
import { RequestMeter } from '../usage/request-meter.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The request's context (see RequestContext): made by the first hook, so null only before it ran. */
    cortex: RequestContext | null;
  }
}

const SAFE_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * What the gateway knows of one request, made once when it arrives and handed to whatever runs it:
 * its id, when it arrived, its headers, the stored key it was made with, its tier and account, and
 * the meter its runs report their usage to. The hooks fill it in as they judge the request (the key
 * check its principal, the priority hook its tier, the admission its payer); a run holds it for as
 * long as it needs it (a background response's, after the reply closed), so nothing about a request
 * is kept in a table by its id or forgotten on a timer.
 */
export class RequestContext {
  /** What the request's runs used, and who pays for it. */
  readonly meter = new RequestMeter();
  private principalOf: KeyPrincipal | undefined;
  private priorityOf: RequestPriority | undefined;
  /** Gives back the upload slot its body holds while it arrives (http/upload-slots.ts). */
  private uploadSlot: (() => void) | null = null;

  constructor(
    /** The caller's `x-request-id` when it is sane, else a fresh one: logs, errors and the response all echo it. */
    readonly id: string,
    /** performance.now() at arrival: the first hop of time to first byte. */
    readonly arrival: number,
    /** Its HTTP headers: its spans continue their traceparent. */
    readonly headers: IncomingHeaders,
  ) {}

  /** The stored key the request was made with (http/access.ts); undefined for a config-file key or none. */
  get principal(): KeyPrincipal | undefined {
    return this.principalOf;
  }

  /** Its tier and account on the workers' queues (http/priority.ts); undefined: the workers' lowest tier. */
  get priority(): RequestPriority | undefined {
    return this.priorityOf;
  }

  /** The key check found a stored key. */
  admitKey(principal: KeyPrincipal): void {
    this.principalOf = principal;
  }

  /** The priority hook (or a WebSocket turn's admission) gave the request its tier. */
  prioritize(priority: RequestPriority): void {
    this.priorityOf = priority;
  }

  /** Its body holds an upload slot until `releaseUpload` (or `free` is called by whoever else ends it). */
  holdUpload(free: () => void): void {
    this.uploadSlot = free;
  }

  /** Its body is in (or the request was aborted): its upload slot goes back, once. */
  releaseUpload(): void {
    this.uploadSlot?.();
    this.uploadSlot = null;
  }

  /**
   * One turn of a Responses WebSocket opened by this request: an id of its own (`<connection>.<n>`),
   * its own arrival and meter, the connection's key, headers and tier (a stored key's turn is given
   * its key's tier as it is at that turn).
   */
  turn(n: number): RequestContext {
    const turn = new RequestContext(`${this.id}.${n}`, performance.now(), this.headers);
    turn.principalOf = this.principalOf;
    turn.priorityOf = this.priorityOf;
    return turn;
  }

  /** A request's context from its headers, arriving now. */
  static of(headers: IncomingHeaders): RequestContext {
    const given = headers[REQUEST_ID_HEADER];
    const id = typeof given === 'string' && SAFE_ID.test(given) ? given : `req_${randomBytes(12).toString('hex')}`;
    return new RequestContext(id, performance.now(), headers);
  }
}

/** Makes every request's context as it arrives: the first hook, before any other reads it. */
export function installRequestContext(fastify: FastifyInstance): void {
  fastify.decorateRequest('cortex', null);
  fastify.addHook('onRequest', (request, _reply, done) => {
    request.cortex = RequestContext.of(request.headers);
    done();
  });
}

/** The request's context; one that did not pass the hook (an app without it, as in a unit test) gets one now. */
export function contextOf(request: FastifyRequest): RequestContext {
  request.cortex ??= RequestContext.of(request.headers);
  return request.cortex;
}
