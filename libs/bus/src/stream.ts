import { performance } from 'node:perf_hooks';
import type { MsgHdrs, NatsConnection, Subscription } from '@nats-io/transport-node';
import {
  CortexError,
  decodeStreamEvent,
  type StreamEvent,
  type StreamEventBody,
  type TokenLogprob,
} from '@cortex/contracts';
import { decodeJson, encodeJson } from './envelope.js';
import { currentTraceHeaders } from './bus-trace.js';

type Delta = { type: 'text' | 'reasoning'; text: string; pieces: number; tokens?: number[]; logprobs?: TokenLogprob[] };

/**
 * Numbers and publishes one request's events; the producer side of a token stream.
 *
 * Text and reasoning deltas are throttled on the leading edge: a delta goes out at once unless
 * another went out less than `intervalMs` ago, in which case it waits, merged with whatever follows,
 * until the interval is over. A slow stream therefore sends every token the moment it exists, and a
 * fast one (faster than one token per interval) sends a few tokens per message instead of paying a
 * bus message per token; a merged delta says how many pieces it holds (`pieces`). Any other event
 * flushes the pending delta first, so order is kept.
 *
 * With `keepaliveMs`, a `keepalive` event goes out whenever nothing else did for that long, until the
 * stream ends (`finish`, `error` or `close()`): one timer per stream, which wakes at most once per
 * period and never touches the token path.
 */
export class StreamPublisher {
  private seq = 0;
  private pending: Delta | null = null;
  private lastSent = -Infinity;
  /** When any event last went out (keep-alives are only needed when nothing else did). */
  private lastAny = performance.now();
  private timer: NodeJS.Timeout | null = null;
  private keepaliveTimer: NodeJS.Timeout | null = null;
  /** The trace context current where the stream was made, carried on each of its messages (tracing on only). */
  private readonly headers: { headers: MsgHdrs } | undefined;

  constructor(
    private readonly nc: NatsConnection,
    readonly subject: string,
    private readonly intervalMs = 0,
    private readonly keepaliveMs = 0,
  ) {
    const headers = currentTraceHeaders();
    this.headers = headers && { headers };
    if (keepaliveMs > 0) this.armKeepalive(keepaliveMs);
  }

  emit(event: StreamEventBody): void {
    if ((event.type === 'text' || event.type === 'reasoning') && this.intervalMs > 0) {
      if (this.pending?.type === event.type) {
        this.pending.text += event.text;
        this.pending.pieces += event.pieces ?? 1;
        // The merged delta carries every token id its pieces carried: ids are a stream's resume point.
        // The held array is this publisher's own (copied when the delta was first held), so appending is per token, not per window.
        if (event.tokens) (this.pending.tokens ??= []).push(...event.tokens);
        if (event.type === 'text' && event.logprobs) (this.pending.logprobs ??= []).push(...event.logprobs);
        return;
      }
      this.flush();
      const wait = this.lastSent + this.intervalMs - performance.now();
      if (wait <= 0) {
        this.send(event);
        return;
      }
      this.pending = {
        type: event.type,
        text: event.text,
        pieces: event.pieces ?? 1,
        ...(event.tokens && { tokens: [...event.tokens] }),
        ...(event.type === 'text' && event.logprobs && { logprobs: [...event.logprobs] }),
      };
      this.timer = setTimeout(() => this.flush(), wait);
      return;
    }
    this.flush();
    this.send(event);
  }

  /** Stops the keep-alives (a terminal event does so itself). */
  close(): void {
    if (this.keepaliveTimer) clearTimeout(this.keepaliveTimer);
    this.keepaliveTimer = null;
  }

  private armKeepalive(delayMs: number): void {
    this.keepaliveTimer = setTimeout(() => {
      const idle = performance.now() - this.lastAny;
      if (idle >= this.keepaliveMs) this.emit({ type: 'keepalive' });
      if (this.keepaliveTimer) this.armKeepalive(idle >= this.keepaliveMs ? this.keepaliveMs : this.keepaliveMs - idle);
    }, delayMs);
  }

  /** Sends a held delta now. */
  flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const pending = this.pending;
    this.pending = null;
    // Observers count tokens by pieces (the console's live view); one piece stays implicit.
    if (pending) {
      const { pieces, ...one } = pending;
      this.send(pieces > 1 ? pending : one);
    }
  }

  private send(event: StreamEventBody): void {
    const now = performance.now();
    this.lastAny = now;
    if (event.type === 'text' || event.type === 'reasoning') this.lastSent = now;
    this.nc.publish(this.subject, encodeJson({ ...event, seq: this.seq++ }), this.headers);
    if (event.type === 'finish' || event.type === 'error') this.close();
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
  /** Set by `last`: nothing more is handed on, and the producer's final event resolves it. */
  private tail: ((event: StreamEvent | null) => void) | null = null;

  constructor(
    nc: NatsConnection,
    readonly subject: string,
    private readonly options: StreamReaderOptions,
  ) {
    this.sub = nc.subscribe(subject, {
      callback: (error, msg) => {
        if (error) return this.fail(new CortexError('worker_lost', `stream ${subject} failed: ${error.message}`));
        let event: StreamEvent;
        try {
          event = decodeStreamEvent(decodeJson(msg.data));
        } catch (cause) {
          return this.fail(
            new CortexError('internal', `stream ${subject}: bad event: ${(cause as Error).message}`, { cause }),
          );
        }
        this.push(event);
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
        if (this.ended || this.tail) return;
        await new Promise<void>((resolve) => (this.wake = resolve));
      }
    } finally {
      // A reader waiting for the producer's last event (see `last`) stays subscribed until it comes.
      if (!this.tail) this.close();
    }
  }

  /**
   * Stops handing events on and waits at most `timeoutMs` for the producer's final event (`finish` or
   * `error`: a cancelled run's finish says what it used), then closes. Null when none came in time, or
   * the stream failed first. Events queued and not yet read are passed over.
   */
  last(timeoutMs: number): Promise<StreamEvent | null> {
    const queued = this.queue.find((event) => event.type === 'finish' || event.type === 'error');
    this.queue.length = 0;
    if (queued || this.ended || this.failure) {
      this.close();
      return Promise.resolve(queued ?? null);
    }
    return new Promise((resolve) => {
      const timer = setTimeout(() => end(null), timeoutMs);
      const end = (event: StreamEvent | null): void => {
        clearTimeout(timer);
        this.tail = null;
        this.close();
        resolve(event);
      };
      this.tail = end;
      // Whoever reads the events stops now.
      this.notify();
    });
  }

  private push(event: StreamEvent): void {
    if (this.tail) {
      // Only the end matters now: what came between (or a gap) was never going to be read.
      if (event.type === 'finish' || event.type === 'error') this.tail(event);
      return;
    }
    if (event.seq !== this.expected) {
      this.fail(
        new CortexError('worker_lost', `stream ${this.subject}: expected event ${this.expected}, got ${event.seq}`),
      );
      return;
    }
    this.expected++;
    this.resetTimer();
    this.queue.push(event);
    this.notify();
  }

  /** Ends the stream with `error` after the events already queued (e.g. its producer is known to be gone). */
  fail(error: CortexError): void {
    if (this.ended) return;
    if (this.tail) return this.tail(null);
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

/** Reads events up to and including the first that carries output (or ends the stream). */
export async function untilFirstToken(iterator: AsyncIterator<StreamEvent>): Promise<StreamEvent[]> {
  const head: StreamEvent[] = [];
  for (;;) {
    const next = await iterator.next();
    if (next.done) return head;
    head.push(next.value);
    if (next.value.type !== 'start' && next.value.type !== 'keepalive') return head;
  }
}
