import type { FastifyInstance } from 'fastify';

/** How much of an oversized upload is read and thrown away after its 413, at most. */
export interface DrainBudget {
  bytes: number;
  ms: number;
}

/** 16 times the body limit and at least 128 MiB, for 30 s: enough for any client that sends a body by mistake, not a sink for a flood. */
export function drainBudget(bodyLimitBytes: number): DrainBudget {
  return { bytes: Math.max(128 * 1024 * 1024, 16 * bodyLimitBytes), ms: 30_000 };
}

/**
 * A body refused before it has arrived whole: over `body_limit_bytes` (a 413 from its Content-Length),
 * nested too deep (a 400 from the scan while it arrives), past its key's upload caps (a 429 before it
 * is read). The connection would then close at once; a client that writes the whole body before it
 * reads (Node's fetch, most SDKs) keeps writing into a closed socket, the kernel answers with a reset,
 * and the reset throws away the refusal still unread in the client's buffer: it sees EPIPE or
 * ECONNRESET instead (a 7.6 MiB body refused for its depth did).
 * So the connection stays open and the rest of the upload is read and discarded (Node's own keep-alive
 * path does that), within a budget; past it the socket is destroyed.
 */
export function installOversizeDrain(fastify: FastifyInstance, budget: DrainBudget): void {
  fastify.addHook('onSend', (request, reply, payload, done) => {
    const raw = request.raw;
    if (reply.statusCode < 400 || reply.statusCode >= 500 || raw.complete) return done(null, payload);
    reply.removeHeader('connection');
    // After Node's own 'finish' handler, which starts discarding the request. Discarded bytes are no
    // longer 'data' events (and the parser reads the socket directly), so the socket's count is watched.
    reply.raw.once('finish', () => {
      const socket = raw.socket;
      if (raw.complete || !socket) return;
      const start = socket.bytesRead;
      const started = Date.now();
      const watch = setInterval(() => {
        if (raw.complete || socket.destroyed) return clearInterval(watch);
        if (socket.bytesRead - start <= budget.bytes && Date.now() - started <= budget.ms) return;
        clearInterval(watch);
        socket.destroy();
      }, 50);
      watch.unref();
    });
    done(null, payload);
  });
}
