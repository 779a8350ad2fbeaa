import {
  headers as natsHeaders,
  RequestError,
  TimeoutError,
  type NatsConnection,
  type Subscription,
} from '@nats-io/transport-node';
import { CortexError, decodeReply, REQUEST_ID_HEADER, type Decoder } from '@cortex/contracts';
import { decodeJson, encodeJson } from './envelope.js';
import { decodeLarge, encodeLarge } from './payload.js';
import { currentTraceHeaders, tracedRequest } from './bus-trace.js';

export interface RequestOptions {
  timeoutMs?: number;
  requestId?: string;
}

/** Options with the reader of the reply's data, which types what `request` resolves to. */
export interface DecodedRequestOptions<T> extends RequestOptions {
  decode: Decoder<T>;
}

/** Typed request/reply and publish over one NATS connection, mapping bus failures to error codes. */
export class BusClient {
  constructor(
    readonly nc: NatsConnection,
    private readonly defaultTimeoutMs = 5_000,
  ) {}

  /**
   * Sends a request and unwraps the reply envelope. No responders → `service_unavailable` (HTTP 503),
   * no answer in time → `timeout` (HTTP 504), an error reply → that error. Bodies over the server's
   * `max_payload`, either way, travel through the object store (see `encodeLarge`).
   *
   * The reply is checked, never cast: the envelope always, its data with `options.decode` (without
   * one the data stays `unknown`). A malformed reply is the replying service's fault → `internal`,
   * naming the field.
   */
  request<T>(subject: string, payload: unknown, options: DecodedRequestOptions<T>): Promise<T>;
  request(subject: string, payload: unknown, options?: RequestOptions): Promise<unknown>;
  async request(
    subject: string,
    payload: unknown,
    options: RequestOptions & { decode?: Decoder<unknown> } = {},
  ): Promise<unknown> {
    const timeout = options.timeoutMs ?? this.defaultTimeoutMs;
    const headers = natsHeaders();
    if (options.requestId) headers.set(REQUEST_ID_HEADER, options.requestId);
    return tracedRequest(subject, headers, async () => {
      let body: unknown;
      try {
        const out = await encodeLarge(this.nc, payload, headers);
        const msg = await this.nc.request(subject, out.data, { timeout, headers: out.headers });
        body = await decodeLarge(this.nc, msg);
      } catch (error) {
        throw mapRequestError(error, subject, timeout);
      }
      const reply = malformedAs(subject, () => decodeReply(body));
      if (!reply.ok) throw CortexError.fromBody(reply.error);
      const decode = options.decode;
      return decode ? malformedAs(subject, () => decode(reply.data)) : reply.data;
    });
  }

  /**
   * Whether nothing serves `subject` any more: asks it and answers true only on "no responders",
   * which NATS knows at once when the serving process is gone. An answer, an error or a timeout
   * (a stalled or frozen process still holds its subscription) is false.
   */
  unreachable(subject: string, payload: unknown, timeoutMs: number): Promise<boolean> {
    return this.request(subject, payload, { timeoutMs }).then(
      () => false,
      (error: unknown) => isNoResponders(error),
    );
  }

  publish(subject: string, payload: unknown, requestId?: string): void {
    const traced = currentTraceHeaders();
    if (!requestId && !traced) {
      this.nc.publish(subject, encodeJson(payload));
      return;
    }
    const headers = traced ?? natsHeaders();
    if (requestId) headers.set(REQUEST_ID_HEADER, requestId);
    this.nc.publish(subject, encodeJson(payload), { headers });
  }

  /** Subscribes with a callback that receives decoded JSON; bad JSON is dropped with a report. */
  subscribe(
    subject: string,
    onMessage: (data: unknown, subject: string) => void,
    onBad?: (error: Error) => void,
  ): Subscription {
    return this.nc.subscribe(subject, {
      callback: (error, msg) => {
        if (error) return onBad?.(error);
        try {
          onMessage(decodeJson(msg.data), msg.subject);
        } catch (cause) {
          onBad?.(cause as Error);
        }
      },
    });
  }
}

/** Runs a reader over a reply; its `invalid_request` (the field at fault) becomes the replier's `internal`. */
export function malformedAs<T>(subject: string, read: () => T): T {
  try {
    return read();
  } catch (error) {
    throw new CortexError('internal', `${subject} sent a malformed reply: ${(error as Error).message}`, {
      cause: error,
    });
  }
}

/** The bus's "no responders": nothing holds the subject, e.g. the process that served it was killed. */
function isNoResponders(error: unknown): boolean {
  return (
    error instanceof CortexError &&
    error.code === 'service_unavailable' &&
    error.cause instanceof RequestError &&
    error.cause.isNoResponders()
  );
}

export function mapRequestError(error: unknown, subject: string, timeoutMs: number): CortexError {
  if (error instanceof CortexError) return error;
  if (error instanceof RequestError && error.isNoResponders()) {
    return new CortexError('service_unavailable', `nothing is serving ${subject}: is that service running?`, {
      retryAfter: 2,
      cause: error,
    });
  }
  if (error instanceof TimeoutError || (error instanceof RequestError && error.cause instanceof TimeoutError)) {
    return new CortexError('timeout', `${subject} did not answer within ${timeoutMs} ms`, { cause: error });
  }
  return new CortexError('internal', `bus request to ${subject} failed: ${(error as Error).message}`, { cause: error });
}
