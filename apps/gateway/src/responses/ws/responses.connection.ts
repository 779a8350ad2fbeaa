import type { RawData, WebSocket } from 'ws';
import { CortexError, NO_USAGE } from '@cortex/contracts';
import {
  decodeSocketMessage,
  socketErrorEvent,
  type LocalResponse,
  type ResponseResource,
  type ResponsesState,
  type SocketMessage,
  type SocketTurn,
} from '@cortex/wire';
import { MAX_BODY_DEPTH, textTooDeep, tooDeep, tooDeepText } from '../../http/body-depth.js';
import { toCortexError } from '../../http/error-response.js';
import type { DialectAdapter, DialectStream } from '../../inference/dialect.js';
import type { InferenceResponder } from '../../inference/inference.responder.js';
import type { InferenceService } from '../../inference/inference.service.js';
import { responsesStateOf } from '../responses.state.js';
import { SocketSink } from './socket.sink.js';
import type { TurnAdmission } from './turn-admission.js';
import type { RequestContext } from '../../http/request-context.js';
import type { RefusalCounter } from '../../http/refusals.js';
import { hasMcpTools } from '../../mcp/mcp-request.js';
import type { McpLoops } from '../../mcp/mcp-loops.js';
import type { HeldBytes } from '../../http/upload-slots.js';

/** Creates one connection may have waiting behind the one in flight; more is a client that does not wait. */
const MAX_QUEUED = 16;
/** How often a connection looks for a message stuck partly received (see watchPartial). */
const PARTIAL_CHECK_MS = 5_000;
/** How long a socket closed for a stalled message has to answer the close before it is cut. */
const CLOSE_GRACE_MS = 1_000;

export interface ConnectionDeps {
  inference: InferenceService;
  responder: InferenceResponder;
  adapter: DialectAdapter;
  limitMs: number;
  refusals: RefusalCounter;
  /** What the connection's key holds in this gateway, its bodies and queued messages together (`gateway.max_upload_bytes_per_key`). */
  held: HeldBytes;
  /** The runs of turns with `mcp` tools, which the gateway runs itself. */
  loops: McpLoops;
}

/** What the upgrade request gives every turn of the connection. */
export interface ConnectionContext {
  /** Whom the per-key caps count this socket against (see clientOf). */
  client: string;
  /** The upgrade request's: each turn's is made from it (see RequestContext.turn). */
  request: RequestContext;
  session: string | undefined;
  /** A stored key's checks and limits for each turn; null for a config-file key or none. */
  gate: TurnAdmission | null;
}

/**
 * One WebSocket on `/v1/responses`: each `response.create` message is a turn, run one at a time in the
 * order received, its events the same objects SSE sends. The connection's latest response lives here,
 * in this gateway's memory, so the next turn continues it without the store (and `store: false` turns
 * continue at all); it goes when the socket does.
 */
export class ResponsesConnection {
  private latest: LocalResponse | null = null;
  private queue: Promise<void> = Promise.resolve();
  /** Turns received and not finished: the one in flight and those waiting. */
  private pending = 0;
  /** The size of those turns' messages. */
  private pendingBytes = 0;
  private turns = 0;
  private closed = false;
  /** The gateway is stopping: no new turns; the ones received finish, then the socket closes. */
  private draining = false;
  /** The turn in flight, to cancel when the client goes. */
  private cancelCurrent: ((reason: string) => void) | null = null;
  private readonly limit: NodeJS.Timeout;
  /** Watches for a message that stays partly received (see watchPartial). */
  private readonly partial: NodeJS.Timeout | null;
  private partialSince: number | null = null;
  /** Bytes the socket may still send now (`gateway.ws_bytes_per_second`, a token bucket), and when that was worked out. */
  private allowance: number;
  private allowanceAt = Date.now();
  /** Ends the pause of a socket that sent past its allowance. */
  private throttled: NodeJS.Timeout | null = null;

  constructor(
    private readonly socket: WebSocket,
    private readonly context: ConnectionContext,
    private readonly deps: ConnectionDeps,
  ) {
    socket.on('message', (data, isBinary) => this.receive(data, isBinary));
    socket.on('close', () => this.end('client disconnected'));
    socket.on('error', () => this.end('the WebSocket failed'));
    this.limit = setTimeout(() => this.expire(), deps.limitMs);
    const timeoutMs = deps.inference.config.gateway.requestTimeoutMs;
    // Checked four times per timeout (at most every PARTIAL_CHECK_MS): a stalled message goes within about 1.5 timeouts.
    this.partial =
      timeoutMs > 0
        ? setInterval(() => this.watchPartial(timeoutMs), Math.min(PARTIAL_CHECK_MS, Math.max(100, timeoutMs / 4)))
        : null;
    this.partial?.unref();
    this.allowance = 2 * deps.inference.config.gateway.bodyLimitBytes;
  }

  /**
   * One socket may send `gateway.ws_bytes_per_second` on average (after a burst of two messages of
   * the largest size): past it the gateway stops reading it until the average is back under, and TCP
   * makes the client wait. A socket sending 8 MiB messages as fast as it could took the CPU honest
   * clients needed (their p50 rose 8–15×).
   */
  private meter(size: number): void {
    const rate = this.deps.inference.config.gateway.wsBytesPerSecond;
    if (rate <= 0) return;
    const now = Date.now();
    const burst = 2 * this.deps.inference.config.gateway.bodyLimitBytes;
    this.allowance = Math.min(burst, this.allowance + ((now - this.allowanceAt) * rate) / 1000) - size;
    this.allowanceAt = now;
    if (this.allowance >= 0 || this.throttled) return;
    this.deps.refusals.count('ws_rate');
    this.socket.pause();
    this.throttled = setTimeout(
      () => {
        this.throttled = null;
        if (!this.closed) this.socket.resume();
      },
      Math.ceil((-this.allowance / rate) * 1000),
    );
  }

  /**
   * A message must arrive whole within `gateway.request_timeout_ms`, as an HTTP request must: a
   * client that sends a frame one byte short of its end would otherwise hold up to
   * `body_limit_bytes` of the gateway's memory for as long as it likes. Idle between messages is fine.
   * The `ws` receiver's own counters say whether a message is partly in (its bytes buffered, or the
   * fragments of a message sent in pieces).
   */
  private watchPartial(timeoutMs: number): void {
    const receiver = (this.socket as unknown as { _receiver?: { _bufferedBytes?: number; _fragments?: unknown[] } })
      ._receiver;
    const partly = (receiver?._bufferedBytes ?? 0) > 0 || (receiver?._fragments?.length ?? 0) > 0;
    // While the gateway itself holds the socket (gateway.ws_bytes_per_second), its message is not the client's delay.
    if (!partly || this.throttled) {
      this.partialSince = null;
      return;
    }
    this.partialSince ??= Date.now();
    if (Date.now() - this.partialSince < timeoutMs) return;
    this.deps.refusals.count('ws_message_timeout');
    this.end('a message took too long to arrive');
    this.socket.close(
      1008,
      `a message took over ${Math.round(timeoutMs / 1000)} s to arrive (gateway.request_timeout_ms)`,
    );
    // A client that stalls its message does not answer the close either: its buffered bytes go now,
    // not after the 30 s the closing handshake may take.
    setTimeout(() => this.socket.terminate(), CLOSE_GRACE_MS).unref();
  }

  private receive(data: RawData, isBinary: boolean): void {
    if (this.closed) return;
    if (this.draining) {
      this.sendError(
        new CortexError(
          'service_unavailable',
          'this gateway is shutting down: open a new connection and send this response.create again',
          { retryAfter: 1 },
        ),
      );
      return;
    }
    // One turn in flight and MAX_QUEUED waiting (counted on arrival, however the messages were batched),
    // holding at most two messages of the largest size a body may have.
    const size = rawSize(data);
    this.meter(size);
    const maxBytes = 2 * this.deps.inference.config.gateway.bodyLimitBytes;
    if (this.pending > MAX_QUEUED || (this.pending > 0 && this.pendingBytes + size > maxBytes)) {
      const held =
        this.pending > MAX_QUEUED
          ? `${MAX_QUEUED} response.create messages are already waiting`
          : `the messages waiting would hold ${kib(this.pendingBytes + size)}, over ${kib(maxBytes)} (twice gateway.body_limit_bytes)`;
      this.sendError(
        new CortexError(
          'busy',
          `${held} on this connection: wait for their responses, or open another connection for parallel runs`,
        ),
      );
      return;
    }
    // The key's bodies and messages on every connection together (gateway.max_upload_bytes_per_key).
    const { client } = this.context;
    const cap = this.deps.inference.config.gateway.maxUploadBytesPerKey;
    if (!this.deps.held.fits(client, size, cap)) {
      this.deps.refusals.count('upload_bytes');
      const held = this.deps.held.of(client);
      this.sendError(
        new CortexError(
          'rate_limit_exceeded',
          'the bodies being sent and WebSocket messages waiting with this ' +
            `key would hold ${held + size} bytes, over gateway.max_upload_bytes_per_key ` +
            `(${cap}): wait for their responses, or send fewer at once`,
          { retryAfter: 1 },
        ),
      );
      return;
    }
    const text = isBinary ? null : data.toString();
    this.pending++;
    this.pendingBytes += size;
    // Held while it waits: once its turn starts it is one request, bounded by the key's limits like an HTTP one.
    this.deps.held.add(client, size);
    let waiting = true;
    const started = (): void => {
      if (waiting) this.deps.held.add(client, -size);
      waiting = false;
    };
    this.queue = this.queue
      .then(async () => {
        started();
        if (this.closed) return;
        if (text === null)
          this.sendError(
            new CortexError(
              'invalid_request',
              'binary messages are not accepted: send response.create as a JSON text message',
            ),
          );
        else await this.turn(text);
      })
      // A turn answers its own failures; this keeps one unexpected throw from stalling the turns behind it.
      .catch((error: Error) =>
        this.deps.inference.logger.error(`${this.context.request.id}: a WebSocket turn failed: ${error.message}`),
      )
      .finally(() => {
        this.pending--;
        this.pendingBytes -= size;
        started();
      });
  }

  private async turn(text: string): Promise<void> {
    const { inference, responder, adapter } = this.deps;
    const context = this.context.request.turn(++this.turns);
    const requestId = context.id;
    // A message that does not decode is a failed turn like any other (counted, answered with an error).
    let message: SocketMessage | CortexError;
    try {
      // A message nested millions deep is refused before it is parsed into millions of objects.
      const deepText = textTooDeep(text);
      if (deepText !== null) throw tooDeepText('the message', deepText);
      message = decodeSocketMessage(text);
    } catch (thrown) {
      message = toCortexError(thrown);
    }
    if (!(message instanceof CortexError) && message.type === 'response.processed') return;
    // Each turn is a request of its own: its span continues the socket's traceparent, if it had one.
    // The turn's own meter: its admission bills it, its run reports to it.
    // A turn with `mcp` tools is a loop of model turns and tool calls; an approval it gives may answer
    // a request of the connection's latest response, stored or not.
    const run =
      !(message instanceof CortexError) && hasMcpTools(message.body)
        ? this.deps.loops.responses(context, (id) =>
            this.latest?.id === id ? { output: this.latest.items } : undefined,
          )
        : inference.open('openai.responses', context);
    this.cancelCurrent = (reason) => run.cancel(reason);
    const sink = new SocketSink(this.socket, inference.config.gateway.stallTimeoutMs);
    let previous: string | undefined;
    let renderer: DialectStream | null = null;
    /** Ends the turn's admission: its lease released, its reservation settled with its usage. */
    let admitted: (() => void) | null = null;
    try {
      if (message instanceof CortexError) throw message;
      const { body, generate } = message;
      // The HTTP routes refuse these before any handler (installBodyDepth); a socket message is checked here.
      const deep = tooDeep(body);
      if (deep !== null)
        throw new CortexError(
          'invalid_request',
          `${deep || 'the message'}: nests deeper than ${MAX_BODY_DEPTH} levels`,
          { param: deep || 'input' },
        );
      // Each turn is admitted like a POST /v1/responses: the same key, model and limit checks.
      if (this.context.gate) admitted = await this.context.gate.admit(context, body, Buffer.byteLength(text), generate);
      previous = typeof body.previous_response_id === 'string' ? body.previous_response_id : undefined;
      const turn: SocketTurn = this.latest && this.latest.id === previous ? { previous: this.latest } : {};
      // A warm-up asks no router early: it places nothing.
      const request = await run.decode(body, this.context.session, turn, generate);
      // Gone while the body was decoded: nothing was placed yet, so nothing runs for nobody.
      if (this.closed) throw new CortexError('cancelled', 'the client disconnected');
      const meta = { id: run.runId, created: Math.floor(run.startedAt / 1000), headers: context.headers };
      // Built on first use, as on HTTP: once the generate command is on its way (see InferenceResponder.stream).
      const stream = (): DialectStream => (renderer ??= adapter.stream(request, meta, run.state));
      let finished: ResponseResource | undefined;
      if (!generate) {
        finished = await this.warmUp(stream(), sink);
        if (finished) this.latest = localResponse(responsesStateOf(run.state), finished);
        return;
      }
      const rendering: Pick<DialectStream, 'frames' | 'settle'> = {
        settle: () => stream().settle?.() ?? Promise.resolve(),
        frames: (event) => {
          const frames = stream().frames(event);
          // Only the finish event renders the terminal event that carries the whole resource.
          if (event.type === 'finish') for (const frame of frames) finished = terminalResource(frame.data) ?? finished;
          return frames;
        },
      };
      await responder.stream(run, sink, () => {
        // The responder's first ask, once the command is sent, is what builds the renderer.
        stream();
        return rendering;
      });
      // A cancelled run (the client went, or the connection's time ran out) ends without a terminal event.
      if (finished) this.latest = localResponse(responsesStateOf(run.state), finished);
    } catch (thrown) {
      const error = toCortexError(thrown);
      run.fail(error, sink.isStarted);
      // The spec: a failed continuation forgets the response it continued.
      if (previous !== undefined && this.latest?.id === previous) this.latest = null;
      if (error.code === 'internal') inference.logger.error(`${requestId}: ${error.message}`);
      if (sink.isStarted) await responder.writeFailure(requestId, sink, renderer, error);
      else sink.send(socketErrorEvent(error.toBody(), error.status));
    } finally {
      this.cancelCurrent = null;
      run.finish();
      admitted?.();
    }
  }

  /**
   * A warm-up turn (`generate: false`): the request was decoded and checked; it completes at once with
   * no output and no tokens, and the connection keeps it, so the next turn continues from its id with
   * only the new input (what Codex does after its warm-up). No model runs.
   */
  private async warmUp(stream: DialectStream, sink: SocketSink): Promise<ResponseResource | undefined> {
    // A finish with nothing before it renders response.created, response.in_progress and response.completed.
    const frames = stream.frames({
      seq: 0,
      type: 'finish',
      reason: 'stop',
      usage: NO_USAGE,
      timings: { ttftMs: 0, promptMs: 0, decodeTokensPerSecond: 0, durationMs: 0, queueMs: 0 },
    });
    // Stored first when the body asked to store it, as every response is before the client sees it end.
    await stream.settle?.();
    for (const frame of frames) sink.data(frame.data);
    return terminalResource(frames.at(-1)?.data);
  }

  private sendError(error: CortexError): void {
    new SocketSink(this.socket, 0).send(socketErrorEvent(error.toBody(), error.status));
  }

  /**
   * The gateway stops (SIGTERM): turns already received run to their end, new ones are refused, then
   * the socket closes with 1001 (going away) so the client reconnects to another gateway. Bounded by
   * the process's drain_timeout_ms, after which it exits whatever runs.
   */
  async drain(): Promise<void> {
    this.draining = true;
    await this.queue;
    if (this.closed) return;
    this.end('the gateway is shutting down');
    this.socket.close(1001, 'the gateway is shutting down');
  }

  /** The client went (or the socket failed): cancel the turn in flight, drop the queue and the state. */
  private end(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.limit);
    if (this.partial) clearInterval(this.partial);
    if (this.throttled) clearTimeout(this.throttled);
    this.latest = null;
    this.cancelCurrent?.(reason);
  }

  /** The spec's connection limit: the turn in flight is cancelled, then the error, then the close. */
  private expire(): void {
    const minutes = Math.round(this.deps.limitMs / 60_000);
    const error = new CortexError(
      'websocket_connection_limit_reached',
      'This WebSocket connection reached its limit of ' +
        `${minutes >= 1 ? `${minutes} minutes` : `${this.deps.limitMs} ms`}: open ` +
        'a new connection and continue with previous_response_id (stored responses) or the full input.',
    );
    this.end('the WebSocket connection reached its time limit');
    void this.queue.then(() => {
      this.sendError(error);
      this.socket.close(1000, 'connection limit reached');
    });
  }
}

/** The full resource a terminal event (`response.completed`, `response.incomplete`) carries. */
function terminalResource(data: unknown): ResponseResource | undefined {
  const event = data as { type?: string; response?: ResponseResource };
  return event.type === 'response.completed' || event.type === 'response.incomplete' ? event.response : undefined;
}

function localResponse(state: ResponsesState, resource: ResponseResource): LocalResponse {
  return {
    id: state.responseId,
    items: [...(state.history ?? []), ...state.input, ...(resource.output as LocalResponse['items'])],
    ...(state.store && { chain: state.chain }),
    ...(state.affinityKey && { affinityKey: state.affinityKey }),
  };
}

function rawSize(data: RawData): number {
  if (Array.isArray(data)) return data.reduce((sum, part) => sum + part.length, 0);
  return data instanceof ArrayBuffer ? data.byteLength : data.length;
}

const kib = (bytes: number): string => `${Math.ceil(bytes / 1024)} KiB`;
