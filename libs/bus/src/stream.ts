import type { NatsConnection, Subscription } from '@nats-io/transport-node';
import { CortexError, type StreamEvent, type StreamEventBody } from '@cortex/contracts';
import { decodeJson, encodeJson } from './envelope.js';

/** Numbers and publishes one request's events; the producer side of a token stream. */
export class StreamPublisher {
  private seq = 0;
  constructor(
    private readonly nc: NatsConnection,
    readonly subject: string,
  ) {}

  emit(event: StreamEventBody): void {
    this.nc.publish(this.subject, encodeJson({ ...event, seq: this.seq++ }));
  }

  get lastSeq(): number {
    return this.seq - 1;
  }
}

export interface StreamReaderOptions {
  /** No event (keep-alives included) for this long → `worker_lost`. */
  idleTimeoutMs: number;
}

/**
 * Subscribes to a stream subject before the producer is asked to start, and yields events in order.
 * Ends after `finish` or `error`. A sequence gap or silence longer than the idle timeout throws,
 * so a dead worker surfaces in seconds rather than hanging the client.
 */
export class StreamReader implements AsyncIterable<StreamEvent> {
  private readonly sub: Subscription;
  private readonly queue: StreamEvent[] = [];
  private failure: CortexError | null = null;
  private wake: (() => void) | null = null;
  private expected = 0;
  private timer: NodeJS.Timeout | null = null;
  private ended = false;

  constructor(
    nc: NatsConnection,
    readonly subject: string,
    private readonly options: StreamReaderOptions,
  ) {
    this.sub = nc.subscribe(subject, {
      callback: (error, msg) => {
        if (error) return this.fail(new CortexError('worker_lost', `stream ${subject} failed: ${error.message}`));
        try {
          this.push(decodeJson(msg.data) as StreamEvent);
        } catch (cause) {
          this.fail(new CortexError('internal', `stream ${subject}: bad event`, { cause }));
        }
      },
    });
  }

  /** Starts the idle clock; call once the producer has acknowledged the request. */
  arm(): void {
    this.resetTimer();
  }

  close(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.ended = true;
    this.sub.unsubscribe();
    this.notify();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<StreamEvent> {
    try {
      for (;;) {
        const event = this.queue.shift();
        if (event) {
          yield event;
          if (event.type === 'finish' || event.type === 'error') return;
          continue;
        }
        if (this.failure) throw this.failure;
        if (this.ended) return;
        await new Promise<void>((resolve) => (this.wake = resolve));
      }
    } finally {
      this.close();
    }
  }

  private push(event: StreamEvent): void {
    if (event.seq !== this.expected) {
      this.fail(new CortexError('worker_lost', `stream ${this.subject}: expected event ${this.expected}, got ${event.seq}`));
      return;
    }
    this.expected++;
    this.resetTimer();
    this.queue.push(event);
    this.notify();
  }

  private fail(error: CortexError): void {
    this.failure ??= error;
    this.notify();
  }

  private resetTimer(): void {
    if (this.ended) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(
      () => this.fail(new CortexError('worker_lost', `no event from the worker for ${this.options.idleTimeoutMs} ms`)),
      this.options.idleTimeoutMs,
    );
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }
}
