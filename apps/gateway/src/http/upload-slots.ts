import type { Socket } from 'node:net';
import { Injectable } from '@nestjs/common';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { CortexError, hashSecret } from '@cortex/contracts';
import { sendError } from './error-response.js';
import { presentedKey } from './access.js';
import type { RefusalCounter } from './refusals.js';
import { contextOf } from './request-context.js';

/**
 * How many request bodies one client may be sending this gateway at once, and how many bytes they may declare
 * (`gateway.max_uploads_per_key`, `gateway.max_upload_bytes_per_key`; 0: no cap).
 */
export interface UploadCaps {
  count: number;
  bytes: number;
  /** The largest body a request may have (`gateway.body_limit_bytes`): what a body of unknown length is counted as. */
  bodyLimit: number;
}

/** A number per client (see clientOf), gone when it is back to 0: what the per-key caps count. */
export class ClientCounts {
  private readonly counts = new Map<string, number>();

  of(client: string): number {
    return this.counts.get(client) ?? 0;
  }

  add(client: string, n = 1): void {
    const left = this.of(client) + n;
    if (left <= 0) this.counts.delete(client);
    else this.counts.set(client, left);
  }
}

/**
 * The bytes each client's request bodies (declared, while they arrive) and queued Responses WebSocket
 * messages hold in this gateway together, against `gateway.max_upload_bytes_per_key`: one count, so a
 * key cannot hold its HTTP share and its WebSocket share at once.
 */
@Injectable()
export class HeldBytes extends ClientCounts {
  /** Whether `bytes` more may be held for the client: the first is always let in, as a body under the body limit always fits. */
  fits(client: string, bytes: number, cap: number): boolean {
    const held = this.of(client);
    return cap <= 0 || held === 0 || held + bytes <= cap;
  }
}

/**
 * Bodies count against their client from their first byte: a request with a body takes an upload slot
 * of its key (a stored key by id, a config key by itself, no key by the client's address) when its
 * headers arrive, and frees it once the body is in (or the request ends). A client past its key's
 * count or bytes gets a 429 before its body is read, so a key limited to 2 concurrent requests
 * cannot hold 96 stalled 8 MiB bodies (~920 MB) open either: at most `bytes` of them, each for at most
 * `gateway.request_timeout_ms`. Per gateway: a client spread over several gateways gets the caps on each.
 */
export function installUploadSlots(
  fastify: FastifyInstance,
  caps: UploadCaps,
  refusals: RefusalCounter,
  bytes: HeldBytes,
): void {
  if (caps.count <= 0 && caps.bytes <= 0) return;
  const uploads = new ClientCounts();
  fastify.addHook('onRequest', (request, reply, done) => {
    const declared = bodyBytes(request, caps.bodyLimit);
    if (declared === null) return done();
    const client = clientOf(request);
    const count = uploads.of(client);
    const declaredSoFar = bytes.of(client);
    const overCount = caps.count > 0 && count + 1 > caps.count;
    if (overCount || !bytes.fits(client, declared, caps.bytes)) {
      refusals.count(overCount ? 'too_many_uploads' : 'upload_bytes');
      const what = overCount
        ? `${count} request bodies are already being sent with this key (gateway.max_uploads_per_key is ${caps.count})`
        : 'the bodies being sent and WebSocket messages waiting with ' +
          `this key would hold ${declaredSoFar + declared} bytes, ` +
          `over gateway.max_upload_bytes_per_key (${caps.bytes})`;
      sendError(
        reply,
        request.url,
        new CortexError('rate_limit_exceeded', `${what}: wait for them to finish, or send fewer at once`, {
          retryAfter: 1,
        }),
        contextOf(request).id,
      );
      return;
    }
    uploads.add(client);
    bytes.add(client, declared);
    let released = false;
    const socket = request.raw.socket as Socket | null;
    const free = (): void => {
      if (released) return;
      released = true;
      uploads.add(client, -1);
      bytes.add(client, -declared);
      // A keep-alive socket carries many requests: it keeps no listener of an ended one.
      socket?.off('close', free);
      reply.raw.off('close', free);
    };
    contextOf(request).holdUpload(free);
    // However the request ends: refused before its body was read (a 400 from the depth scan, a 408
    // from Node), answered, or its client gone, the socket closing with it.
    reply.raw.once('close', free);
    socket?.once('close', free);
    done();
  });
  // The body is in: its slot goes back (the request itself is then bounded by the key's limits).
  fastify.addHook('preValidation', (request, _reply, done) => {
    contextOf(request).releaseUpload();
    done();
  });
  fastify.addHook('onRequestAbort', (request, done) => {
    contextOf(request).releaseUpload();
    done();
  });
}

/** The bytes a request's body will take: its declared length, the body limit for a chunked one, null for none. */
function bodyBytes(request: FastifyRequest, bodyLimit: number): number | null {
  const length = request.headers['content-length'];
  if (length !== undefined) {
    const bytes = Number(length);
    return Number.isFinite(bytes) && bytes > 0 ? Math.min(bytes, bodyLimit) : null;
  }
  return request.headers['transfer-encoding'] !== undefined ? bodyLimit : null;
}

/** Whom the caps count against: the stored key, else the key presented (checked by now; kept as a digest), else the client's address. */
export function clientOf(request: FastifyRequest): string {
  const principal = contextOf(request).principal;
  if (principal) return `key:${principal.key.id}`;
  const presented = presentedKey(request);
  return presented ? `presented:${hashSecret(presented)}` : `address:${request.ip}`;
}
