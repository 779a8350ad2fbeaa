import type { FastifyReply } from 'fastify';
import { sseComment, sseFrame, SSE_DONE } from '@cortex/wire';

/**
 * Writes one SSE response on the raw socket. Headers go out lazily, so errors found before the
 * first event can still be sent as a proper HTTP status.
 */
export class SseWriter {
  private started = false;

  constructor(
    private readonly reply: FastifyReply,
    private readonly requestId: string,
  ) {}

  get isStarted(): boolean {
    return this.started;
  }

  get closed(): boolean {
    return this.reply.raw.destroyed || this.reply.raw.writableEnded;
  }

  start(): void {
    if (this.started) return;
    this.started = true;
    this.reply.hijack();
    this.reply.raw.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
      'x-request-id': this.requestId,
    });
    this.reply.raw.flushHeaders();
  }

  data(payload: unknown, event?: string): void {
    this.write(sseFrame(payload, event));
  }

  comment(text: string): void {
    this.write(sseComment(text));
  }

  done(): void {
    this.write(SSE_DONE);
    this.end();
  }

  end(): void {
    if (!this.closed) this.reply.raw.end();
  }

  private write(frame: string): void {
    this.start();
    if (!this.closed) this.reply.raw.write(frame);
  }
}
