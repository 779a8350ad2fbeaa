import type { FastifyReply } from 'fastify';
import { CortexError } from '@cortex/contracts';
import { sseComment, sseFrame, SSE_DONE } from '@cortex/wire';

/**
 * Writes one SSE response on the raw socket. Headers go out lazily, so errors found before the
 * first event can still be sent as a proper HTTP status. Writes honour backpressure through
 * `drained()`: a slow client makes its stream wait instead of piling frames up in the gateway.
 */
export class SseWriter {
  private started = false;

  constructor(
    private readonly reply: Pick<FastifyReply, 'hijack' | 'raw'>,
    private readonly requestId: string,
    private readonly stallTimeoutMs: number,
    /** Headers known only once the stream starts (which model served it). */
    private readonly lateHeaders: () => Record<string, string> = () => ({}),
  ) {}

  get isStarted(): boolean {
    return this.started;
  }

  get closed(): boolean {
    return this.reply.raw.destroyed || this.reply.raw.writableEnded;
  }

  /** Sends the status line and headers now (a stream with nothing to write yet). */
  start(): void {
    if (this.started) return;
    this.open();
    this.reply.raw.flushHeaders();
  }

  /** Writes the status line and headers into the response; they leave with the first frame, in one packet. */
  private open(): void {
    this.started = true;
    this.reply.hijack();
    this.reply.raw.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
      'x-request-id': this.requestId,
      ...this.lateHeaders(),
    });
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

  /** The socket's buffer is full: wait for `drained()` before the next event. */
  get needsDrain(): boolean {
    return this.reply.raw.writableNeedDrain && !this.closed;
  }

  /**
   * Resolves once the client has taken what was written (at once unless the socket's buffer is
   * full), or the connection closed. A client that takes nothing for `stallTimeoutMs` is cut off:
   * the socket is destroyed and this throws, so the caller stops reading the worker.
   */
  async drained(): Promise<void> {
    if (!this.needsDrain) return;
    const raw = this.reply.raw;
    await new Promise<void>((resolve, reject) => {
      const settle = (error?: CortexError): void => {
        clearTimeout(timer);
        raw.off('drain', onDrain);
        raw.off('close', onDrain);
        if (error) reject(error);
        else resolve();
      };
      const onDrain = (): void => settle();
      const timer = setTimeout(() => {
        raw.destroy();
        settle(new CortexError('timeout', `the client read nothing of the stream for ${this.stallTimeoutMs} ms`));
      }, this.stallTimeoutMs);
      raw.once('drain', onDrain);
      raw.once('close', onDrain);
    });
  }

  /**
   * The headers leave with the first frame, and Node sends what is written in one turn of the event
   * loop (an event's frames, the first token's with the headers) in one socket write.
   */
  private write(frame: string): void {
    if (!this.started) this.open();
    if (!this.closed) this.reply.raw.write(frame);
  }
}
