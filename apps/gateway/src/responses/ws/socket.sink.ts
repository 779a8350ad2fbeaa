import type { WebSocket } from 'ws';
import { CortexError } from '@cortex/contracts';
import type { FrameSink } from '../../inference/inference.responder.js';

/** Past this many unsent bytes the stream waits for the client before it takes the next event. */
const HIGH_WATER_BYTES = 1 << 20;

/**
 * One turn's events on a Responses WebSocket: each frame's JSON object as one text message (the
 * event name is its `type`), keep-alives as pings. Honours backpressure like SseWriter: a client that
 * takes nothing for `stallTimeoutMs` is cut off.
 */
export class SocketSink implements FrameSink {
  private started = false;
  /** Settles when the latest message has been handed to the kernel (or failed). */
  private lastSent: Promise<void> = Promise.resolve();

  constructor(
    private readonly socket: WebSocket,
    private readonly stallTimeoutMs: number,
  ) {}

  get isStarted(): boolean {
    return this.started;
  }

  get open(): boolean {
    return this.socket.readyState === this.socket.OPEN;
  }

  data(payload: unknown): void {
    this.started = true;
    this.send(payload);
  }

  /** Sends one message that is no stream frame (the error envelope): it starts nothing. */
  send(payload: unknown): void {
    if (!this.open) return;
    this.lastSent = new Promise((resolve) => this.socket.send(JSON.stringify(payload), () => resolve()));
  }

  comment(): void {
    if (this.open) this.socket.ping();
  }

  get needsDrain(): boolean {
    return this.open && this.socket.bufferedAmount > HIGH_WATER_BYTES;
  }

  async drained(): Promise<void> {
    if (!this.needsDrain) return;
    let timer: NodeJS.Timeout | undefined;
    const stalled = new Promise<never>((_resolve, reject) => {
      timer = setTimeout(() => {
        this.socket.terminate();
        reject(new CortexError('timeout', `the client read nothing of the stream for ${this.stallTimeoutMs} ms`));
      }, this.stallTimeoutMs);
    });
    try {
      await Promise.race([this.lastSent, stalled]);
    } finally {
      clearTimeout(timer);
    }
  }
}
