import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { StreamReader } from '@cortex/bus';
import {
  backgroundSubject,
  CortexError,
  streamSubject,
  Subjects,
  workerSubject,
  type CanonicalRequest,
  type Dialect,
  type GatewayHops,
  type ErrorCode,
  type FinishReason,
  type GenerateCommand,
  type LoadProgress,
  type ModelKind,
  type Placement,
  type RetrievalApi,
  type PlaceRequest,
  type RequestFinishedEvent,
  type StreamEvent,
  type TokenCount,
  type Timings,
  type Usage,
  decodeDecodedRequest,
  decodeGenerateAccepted,
  decodePlacement,
  decodeTokenCount,
} from '@cortex/contracts';
import type { InferenceService } from './inference.service.js';

/** One request on its way through translator → router → worker, and back as events. */
export class InferenceRun {
  readonly runId = randomBytes(12).toString('hex');
  readonly startedAt = Date.now();
  request: CanonicalRequest | null = null;
  /** Dialect state from the translator (see DecodedRequest). */
  state: unknown = undefined;
  placement: Placement | null = null;
  /** A background response's id: events go to its kept subject, and the worker runs it unwatched. */
  backgroundOf: string | null = null;
  /** Called with the progress of a cold load this request waits for. */
  onLoadProgress: ((progress: LoadProgress) => void) | null = null;
  private placeMs: number | null = null;
  /** Time to first byte inside the gateway, hop by hop; `writeMs` is set when the first token's frame is written. */
  private readonly hops: GatewayHops = { parseMs: 0, decodeMs: 0, generateMs: 0, firstEventMs: 0, writeMs: -1 };
  private firstEventAt = 0;
  /** A request with no translated body (embeddings, rerank): the model it names and the kind it needs. */
  private target: { model: string; kind: ModelKind } | null = null;
  private reader: StreamReader | null = null;
  private finished = false;
  status = 200;
  errorCode: ErrorCode | null = null;
  finishReason: FinishReason | null = null;
  usage: Usage | null = null;
  timings: Timings | null = null;

  constructor(
    private readonly service: InferenceService,
    readonly dialect: Dialect | RetrievalApi,
    readonly requestId: string,
    arrivedAt = performance.now(),
  ) {
    this.hops.parseMs = performance.now() - arrivedAt;
  }

  /**
   * Decodes the body in the translator service; `session` is a session header's affinity key, `socket`
   * what a Responses WebSocket turn adds (see DecodeRequest.socket).
   */
  async decode(body: unknown, session?: string, socket?: object): Promise<CanonicalRequest> {
    const started = performance.now();
    const decoded = await this.service.bus.request(
      Subjects.translatorDecode,
      { dialect: this.dialect, body, ...(session && { session }), ...(socket && { socket }) },
      { requestId: this.requestId, decode: decodeDecodedRequest },
    );
    this.request = decoded.request;
    this.state = decoded.state;
    this.hops.decodeMs = performance.now() - started;
    return decoded.request;
  }

  /** A request the gateway made itself (a compaction's summary), run like a decoded one. */
  use(request: CanonicalRequest): void {
    this.request = request;
  }

  /**
   * Asks the router for a worker (may wait for a cold load), starts generation there, and waits for
   * the first token. A worker that fails before then (gone, or silent past the idle timeout) costs the
   * client nothing: the request is placed once more, on another worker. After the first token a
   * failure reaches the client as an error event.
   */
  async start(): Promise<AsyncIterable<StreamEvent>> {
    const exclude: string[] = [];
    let replaced = 0;
    for (;;) {
      const workerId = await this.placeOrWait(exclude, this.required().affinityKey);
      let reader: StreamReader | null = null;
      try {
        reader = await this.launch(workerId);
        const iterator = reader[Symbol.asyncIterator]();
        const accepted = performance.now();
        const head = await untilFirstToken(iterator);
        this.firstEventAt = performance.now();
        this.hops.firstEventMs = this.firstEventAt - accepted;
        return this.track(head, iterator);
      } catch (error) {
        // A worker that is alive but late (idle timeout) must not keep generating for nobody.
        if (reader) this.stopReading(workerId, `the gateway stopped reading: ${(error as Error).message}`);
        if (!(error instanceof CortexError) || this.cancelled) throw error;
        // The worker is fine but its model just went (swapped out between placement and generate):
        // the router knows by now, so ask again without holding it against the worker.
        if (error.code === 'model_not_ready' && replaced < MAX_REPLACEMENTS) {
          replaced++;
          this.service.logger.log({ msg: `${error.message}; placing the request again`, requestId: this.requestId });
          await new Promise((done) => setTimeout(done, 50 * replaced));
          continue;
        }
        if (exclude.length > 0 || !RETRYABLE.has(error.code)) throw error;
        this.service.logger.warn({ msg: `worker ${workerId} failed before the first token (${error.message}); placing the request again`, requestId: this.requestId });
        exclude.push(workerId);
      }
    }
  }

  /**
   * Prompt tokens of the decoded request, rendered by a worker that has (or loads) the model. Placed
   * without the conversation's affinity: counting does not move a conversation to another worker.
   */
  async countTokens(): Promise<TokenCount> {
    const workerId = await this.placeOrWait([]);
    const request = { ...this.required(), model: this.placement?.model ?? this.required().model };
    return this.service.bus.request(workerSubject(Subjects.workerTokenize, workerId), { request }, { requestId: this.requestId, decode: decodeTokenCount });
  }

  /** Places a request that has no translated body (embeddings, rerank) on a worker holding `model`, of `kind`; waits for a cold load. */
  async placeFor(model: string, kind: ModelKind, exclude: string[] = []): Promise<Placement> {
    this.target = { model, kind };
    await this.placeOrWait(exclude);
    return this.placement as Placement;
  }

  /**
   * Right after start-up no worker may have joined yet: a `no_worker` answer waits (up to
   * `gateway.worker_wait_ms`, or until the client goes) for a worker-up event, then asks again.
   */
  private async placeOrWait(exclude: string[], affinity?: string): Promise<string> {
    const deadline = performance.now() + this.service.config.gateway.workerWaitMs;
    for (;;) {
      // Counted before asking, so a worker that joins between the answer and the wait is not missed.
      const seen = this.service.workerEvents.ups;
      try {
        return await this.place(exclude, affinity);
      } catch (error) {
        if (!(error instanceof CortexError) || error.code !== 'no_worker' || this.cancelled) throw error;
        if (!(await this.service.workerEvents.upAfter(seen, deadline - performance.now(), this.stopped.signal))) throw error;
      }
    }
  }

  private async place(exclude: string[], affinity?: string): Promise<string> {
    const model = this.target?.model ?? this.required().model;
    const placeStarted = performance.now();
    const onProgress = this.onLoadProgress;
    const stopWatching = onProgress ? this.service.watchLoadProgress(model, onProgress) : null;
    try {
      const workerId = await this.askRouter(model, exclude, affinity);
      this.placeMs = (this.placeMs ?? 0) + performance.now() - placeStarted;
      return workerId;
    } finally {
      stopWatching?.();
    }
  }

  /**
   * Asks the routers (a queue group) in tries of PLACE_TRY_MS: a router killed mid-placement never
   * answers, and one request would wait out the whole placement timeout. An unanswered try is sent
   * again with the same run id; a live router joins the placement it already has under way for the
   * run, and a dead router's subscription is gone, so the queue group hands the try to a live one.
   */
  private async askRouter(model: string, exclude: string[], affinity: string | undefined): Promise<string> {
    const kind = this.target?.kind;
    const place: PlaceRequest = { model, exclude, runId: this.runId, ...(affinity && { affinity }), ...(kind && kind !== 'chat' && { kind }) };
    const { placementTimeoutMs } = this.service.config.gateway;
    const deadline = Date.now() + placementTimeoutMs;
    for (let attempt = 0; ; attempt++) {
      try {
        this.placement = await this.service.bus.request(Subjects.routerPlace, { ...place, attempt }, {
          decode: decodePlacement,
          requestId: this.requestId,
          timeoutMs: Math.max(1, Math.min(PLACE_TRY_MS, deadline - Date.now())),
        });
        return this.placement.workerId;
      } catch (error) {
        // Only the bus's own timeout (it carries the NATS error as cause) means "no answer"; a router
        // that answers with an error (its own `timeout` included) has answered.
        const unanswered = error instanceof CortexError && error.code === 'timeout' && error.cause !== undefined;
        if (!unanswered || this.cancelled) throw error;
        if (Date.now() >= deadline) throw new CortexError('timeout', `${Subjects.routerPlace} did not answer within ${placementTimeoutMs} ms`, { cause: error });
      }
    }
  }

  private async launch(workerId: string): Promise<StreamReader> {
    const request = this.required();
    const subject = this.backgroundOf ? backgroundSubject(this.backgroundOf, this.runId) : streamSubject(this.runId);
    // Subscribe before asking the worker to start, so no early event is missed.
    const reader = new StreamReader(this.service.bus.nc, subject, { idleTimeoutMs: this.service.config.gateway.streamIdleTimeoutMs });
    this.reader = reader;
    const model = this.placement?.model ?? request.model;
    const command: GenerateCommand = { runId: this.runId, streamSubject: subject, request: { ...request, model }, ...(this.backgroundOf && { background: true }) };
    const sent = performance.now();
    try {
      await this.service.bus.request(workerSubject(Subjects.workerGenerate, workerId), command, { requestId: this.requestId, decode: decodeGenerateAccepted });
      this.hops.generateMs = performance.now() - sent;
    } catch (error) {
      reader.close();
      throw error;
    }
    reader.arm();
    this.service.watching.set(this.runId, workerId);
    this.service.readers.set(this.runId, reader);
    return reader;
  }

  /** The client went away: stop the worker so the slot frees at once. */
  private cancelled = false;

  /** Aborted when the client goes, to end waits that no longer serve anyone. */
  private readonly stopped = new AbortController();

  cancel(reason: string): void {
    this.cancelled = true;
    this.stopped.abort();
    if (this.finished || !this.placement || !this.reader) return;
    this.finishReason = 'cancelled';
    this.stopReading(this.placement.workerId, reason);
  }

  /** The worker's stream ended with its own finish or error event: nothing left to cancel. */
  private ended = false;

  /**
   * Stops reading the current stream and tells its worker to stop generating, whatever made the
   * gateway give up (client gone, idle timeout, worker declared down, a failure while rendering).
   * A worker that is really gone never hears it; one that is only slow frees its slot at once
   * instead of after the watch lapses.
   */
  private stopReading(workerId: string, reason: string): void {
    const reader = this.reader;
    if (!reader) return;
    this.reader = null;
    this.service.watching.delete(this.runId);
    this.service.readers.delete(this.runId);
    reader.close();
    if (!this.ended) this.service.bus.publish(workerSubject(Subjects.workerCancel, workerId), { runId: this.runId, reason }, this.requestId);
  }

  /** The first token's frame is on the client's socket: the last hop of time to first byte. */
  firstByteWritten(): void {
    if (this.hops.writeMs < 0 && this.firstEventAt) this.hops.writeMs = performance.now() - this.firstEventAt;
  }

  /** A background run has its first token: stop reading and leave it to run on the worker (no cancel). */
  detach(): void {
    this.ended = true;
    if (this.placement) this.stopReading(this.placement.workerId, 'detached');
  }

  /** Records a failure; the HTTP status changes only if the response had not started. */
  fail(error: CortexError, responseStarted: boolean): void {
    if (!responseStarted) this.status = error.status;
    this.errorCode = error.code;
    this.finishReason ??= 'error';
  }

  /** Publishes the request-finished event once; metrics count from it. */
  finish(): void {
    if (this.finished) return;
    if (this.placement) this.stopReading(this.placement.workerId, this.errorCode ? `the request failed (${this.errorCode})` : 'the gateway stopped reading');
    this.finished = true;
    const event: RequestFinishedEvent = {
      requestId: this.requestId,
      model: this.placement?.model ?? this.request?.model ?? this.target?.model ?? 'unknown',
      workerId: this.placement?.workerId ?? null,
      dialect: this.dialect,
      stream: this.request?.stream ?? false,
      status: this.status,
      errorCode: this.errorCode,
      finishReason: this.finishReason,
      usage: this.usage,
      timings: this.timings,
      durationMs: Date.now() - this.startedAt,
      finishedAt: Date.now(),
      coldStart: this.placement?.coldStart ?? false,
      placeMs: this.placeMs,
      hops: this.hops.writeMs < 0 ? null : this.hops,
    };
    this.service.recordFinished(event, this.runId);
  }

  /** The buffered head, then the rest of the stream, noting the finish for the request-finished event. */
  private async *track(head: StreamEvent[], rest: AsyncIterator<StreamEvent>): AsyncIterable<StreamEvent> {
    for (const event of head) yield this.observe(event);
    for (let next = await rest.next(); !next.done; next = await rest.next()) yield this.observe(next.value);
  }

  private observe(event: StreamEvent): StreamEvent {
    if (event.type === 'finish' || event.type === 'error') this.ended = true;
    if (event.type === 'finish') {
      this.finishReason = event.reason;
      this.usage = event.usage;
      this.timings = event.timings;
    }
    return event;
  }

  private required(): CanonicalRequest {
    if (!this.request) throw new Error('decode() must run before start()');
    return this.request;
  }
}

/** How long one try of a placement waits for a router before asking again (a cold load spans many tries). */
const PLACE_TRY_MS = 2_000;

/** How often a request is placed again because its model left the worker it was placed on. */
export const MAX_REPLACEMENTS = 3;

/** Failures that say nothing about the request itself, only about the worker that had it. */
export const RETRYABLE: ReadonlySet<string> = new Set(['worker_lost', 'service_unavailable', 'timeout']);

/** Reads events up to and including the first that carries output (or ends the stream). */
async function untilFirstToken(iterator: AsyncIterator<StreamEvent>): Promise<StreamEvent[]> {
  const head: StreamEvent[] = [];
  for (;;) {
    const next = await iterator.next();
    if (next.done) return head;
    head.push(next.value);
    if (next.value.type !== 'start' && next.value.type !== 'keepalive') return head;
  }
}
