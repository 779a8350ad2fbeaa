import { performance } from 'node:perf_hooks';
import { untilFirstToken, type StreamReader } from '@cortex/bus';
import {
  CortexError,
  Subjects,
  workerSubject,
  type CanonicalRequest,
  type Dialect,
  type ModelKind,
  type Placement,
  type RetrievalApi,
  type RequestFinishedEvent,
  type StreamEvent,
  type TokenCount,
  type UsageOwner,
  decodeTokenCount,
  withSeed,
} from '@cortex/contracts';
import { Tries } from './retry.js';
import { decodeForRun } from './run-decode.js';
import type { RunServices } from './run-services.js';
import type { RequestContext } from '../http/request-context.js';
import type { RequestMeter } from '../usage/request-meter.js';
import { RunTrace } from './run-trace.js';
import { StreamCheckpoint } from './stream-checkpoint.js';
import { RunNotices, type RunListener } from './run-notices.js';
import { RunHops } from './run-hops.js';
import { RunOutcome } from './run-outcome.js';
import { nextPhase, streamEnded, type RunPhase, type RunStep } from './run-phase.js';
import { RunAttempts } from './run-attempts.js';
import { RunStream } from './run-stream.js';

/** What the run was asked: a decoded request, or a model and kind for one with no translated body. */
interface RunInput {
  request: CanonicalRequest | null;
  /** Dialect state from the translator (see DecodedRequest). */
  state: unknown;
  /** A request with no translated body (embeddings, rerank): the model it names and the kind it needs. */
  target: { model: string; kind: ModelKind } | null;
}

/** One request on its way through translator → router → worker, and back as events. */
export class InferenceRun {
  readonly startedAt = Date.now();
  /** Its tries on the bus: where each was placed, the stream it reads (see RunAttempts). */
  private readonly attempts: RunAttempts;
  private readonly input: RunInput = { request: null, state: undefined, target: null };
  /** What the run tells its observers besides its events (see RunNotice). */
  private readonly notices = new RunNotices();
  private readonly hops: RunHops;
  /** Where the run is in its life; it moves only as nextPhase allows (see step). */
  private phase: RunPhase = 'new';
  /** How it ended and what it used, reported once to the request's meter (see RunOutcome). */
  private readonly outcome: RunOutcome;
  /** Aborted when the client goes, to end waits that no longer serve anyone. */
  private readonly stopped = new AbortController();
  /** Where the stream stands for the client: what another worker needs to go on if this one is lost. */
  readonly checkpoint = new StreamCheckpoint();

  /** The current try's id on the bus. */
  get runId(): string {
    return this.attempts.runId;
  }

  get requestId(): string {
    return this.context.id;
  }

  /** Dialect state from the translator (see DecodedRequest); undefined before `decode`. */
  get state(): unknown {
    return this.input.state;
  }

  /** Where the current try runs; null before it was placed. */
  get placement(): Placement | null {
    return this.attempts.placement;
  }

  /** `listener` hears the run's notices (a cold load's steps, a move and its resume) until the returned stop. */
  listen(listener: RunListener): () => void {
    return this.notices.listen(listener);
  }

  /**
   * The run is a background response's (`responseId`): its events go to the response's kept subject,
   * and its worker runs it unwatched. Set before `start`.
   */
  inBackground(responseId: string): void {
    this.attempts.backgroundOf = responseId;
  }

  /** The subject of the current try's events; null before one started. */
  get subject(): string | null {
    return this.attempts.subject;
  }

  constructor(
    private readonly services: RunServices,
    readonly dialect: Dialect | RetrievalApi,
    /** The request's id, arrival, headers and tier (see RequestContext). */
    private readonly context: RequestContext,
    /** This request's spans (see RunTrace); does nothing while tracing is off. */
    private readonly trace: RunTrace = RunTrace.off,
    /** What the request's runs used, and who pays (none: nobody settles a budget with it). */
    private readonly meter: RequestMeter | null = null,
  ) {
    this.hops = new RunHops(context.arrival);
    this.outcome = new RunOutcome(meter?.opened() ?? null);
    this.attempts = new RunAttempts({
      services,
      context,
      hops: this.hops,
      notices: this.notices,
      outcome: this.outcome,
      stopped: this.stopped.signal,
      payer: meter?.payer ?? null,
      streamEnded: () => streamEnded(this.phase),
    });
  }

  /**
   * Decodes the body (see decodeForRun); `session` is a session header's affinity key, `socket` what a
   * Responses WebSocket turn adds (see DecodeRequest.socket).
   */
  async decode(body: unknown, session?: string, socket?: object, placeEarly = true): Promise<CanonicalRequest> {
    const started = performance.now();
    const decoded = await this.trace.run(() =>
      decodeForRun(this.services, {
        dialect: this.dialect,
        requestId: this.requestId,
        body,
        session,
        socket,
        placeEarly,
      }),
    );
    // Drawn once per run, before placement: a retry or a move samples with the same seed, and the
    // response can name it (SEED_HEADER) before its first byte.
    const request = withSeed(decoded.request);
    this.trace.decoded(request);
    this.input.request = request;
    this.input.state = decoded.state;
    this.attempts.early = decoded.early;
    this.step('decoded');
    this.hops.decoded(started);
    return request;
  }

  /** A request the gateway made itself (a compaction's summary), run like a decoded one. */
  use(request: CanonicalRequest): void {
    const seeded = withSeed(request);
    this.trace.decoded(seeded);
    this.input.request = seeded;
    this.step('decoded');
  }

  /** The seed the run samples with (the request's, or one drawn for it), once decoded. */
  get seeds(): readonly number[] {
    const seed = this.input.request?.sampling.seed;
    return seed === undefined ? [] : [seed];
  }

  /**
   * Asks the router for a worker (may wait for a cold load), starts generation there, and waits for
   * the first token. A worker that fails before then (gone, or silent past the idle timeout) costs the
   * client nothing: the request is placed once more, on another worker. After the first token a
   * failure reaches the client as an error event.
   */
  start(): Promise<AsyncIterable<StreamEvent>> {
    return this.trace.run(() => this.startTraced());
  }

  private async startTraced(): Promise<AsyncIterable<StreamEvent>> {
    const asked = this.required().model;
    const tries = new Tries(
      (workerId) => this.services.placer.forget(workerId),
      this.services.catalogue.find(asked)?.fallback ?? [],
    );
    for (;;) {
      this.step('place');
      let workerId: string;
      try {
        workerId = await this.attempts.placeGeneration(this.required(), tries.exclude, tries.workerWaitMs());
      } catch (error) {
        // No place for the model: its fallback, if it has one left, else the failure stands.
        this.attempts.fallBack(
          asked,
          await tries.after(tries.placementFailed(error), null, this.stopped.signal.aborted),
        );
        this.attempts.next();
        continue;
      }
      // Cancelled while the router answered: nothing has started, so nothing runs for nobody.
      if (this.stopped.signal.aborted)
        throw new CortexError('cancelled', 'the request was cancelled while it was placed');
      let reader: StreamReader | null = null;
      this.trace.attempt(this.placement as Placement);
      try {
        reader = await this.trace.run(() => this.attempts.launch(workerId, this.required()));
        this.step('run');
        const iterator = reader[Symbol.asyncIterator]();
        const accepted = performance.now();
        const head = await untilFirstToken(iterator);
        // The worker failed the try before any output (its upstream refused or failed, its queue was
        // full): decided like any failure before the first token, so another place may serve it.
        const last = head.at(-1);
        if (last?.type === 'error') throw CortexError.fromBody(last.error);
        this.hops.firstEvent(accepted);
        this.trace.firstToken();
        this.step('first-token');
        return this.track(head, iterator);
      } catch (error) {
        this.trace.attemptFailed(error);
        // A worker that is alive but late (idle timeout) must not keep generating for nobody. The client
        // was given nothing, and another worker may start again: this try costs it nothing.
        if (reader)
          this.attempts.stopReading(workerId, `the gateway stopped reading: ${(error as Error).message}`, false);
        const message = (error as Error).message;
        // The worker is fine but its model just went (swapped out between placement and generate):
        // the router knows by now, so ask again without holding it against the worker.
        const next = await tries.after(error, workerId, this.stopped.signal.aborted);
        if (next === 'replace')
          this.services.logger.log({ msg: `${message}; placing the request again`, requestId: this.requestId });
        else if (typeof next === 'object') this.attempts.fallBack(asked, next, message);
        else
          this.services.logger.warn({
            msg: `worker ${workerId} failed before the first token (${message}); placing the request again`,
            requestId: this.requestId,
          });
        this.attempts.next();
      }
    }
  }

  /** The model serving the request in place of the one it asked for (its catalogue `fallback`), once one does. */
  get servedBy(): string | null {
    return this.attempts.servedBy;
  }

  /**
   * Prompt tokens of the decoded request, rendered by a worker that has (or loads) the model. Placed
   * without the conversation's affinity: counting does not move a conversation to another worker.
   */
  countTokens(): Promise<TokenCount> {
    return this.trace.run(() => this.countTokensTraced());
  }

  private async countTokensTraced(): Promise<TokenCount> {
    const tries = new Tries((workerId) => this.services.placer.forget(workerId));
    for (;;) {
      this.step('place');
      const workerId = await this.attempts.placeOrWait(
        { model: this.attempts.serving(this.required().model) },
        tries.exclude,
      );
      this.step('run');
      const request = { ...this.required(), model: this.placement?.model ?? this.required().model };
      try {
        return await this.services.bus.request(
          workerSubject(Subjects.workerTokenize, workerId),
          { request },
          { requestId: this.requestId, decode: decodeTokenCount },
        );
      } catch (error) {
        // Its model just went, or the worker drains (a reused placement can be a moment behind): ask a router again.
        await tries.after(error, workerId, this.stopped.signal.aborted);
      }
    }
  }

  /** Places a request that has no translated body (embeddings, rerank) on a worker holding `model`, of `kind`; waits for a cold load. */
  async placeFor(model: string, kind: ModelKind, exclude: string[] = []): Promise<Placement> {
    this.input.target = { model, kind };
    this.step('place');
    await this.trace.run(() => this.attempts.placeOrWait({ model, kind }, exclude));
    this.step('run');
    return this.placement as Placement;
  }

  /** The client went away: end every wait and stop the worker so the slot frees at once. */
  cancel(reason: string): void {
    this.stopped.abort();
    if (this.phase === 'finished') return;
    this.outcome.cancelled();
    if (this.placement) this.attempts.stopReading(this.placement.workerId, reason);
  }

  /** The first token's frame is on the client's socket: the last hop of time to first byte. */
  /** The stored key that pays for the run, with its account; null for a config-file key or none. */
  get payer(): UsageOwner | null {
    return this.meter?.payer ?? null;
  }

  /** Runs `fn` in the run's trace context: spans it opens (an MCP tool call between turns) are the request's children. */
  inTrace<T>(fn: () => T): T {
    return this.trace.run(fn);
  }

  firstByteWritten(): void {
    this.hops.firstByteWritten();
  }

  /** A background run has its first token: stop reading and leave it to run on the worker (no cancel). */
  detach(): void {
    this.step('detach');
    if (this.placement) this.attempts.stopReading(this.placement.workerId, 'detached');
  }

  /** Runs `work` in this request's trace: what it sends on the bus (a retrieval's call to its worker) joins the request's spans. */
  traced<T>(work: () => T): T {
    return this.trace.run(work);
  }

  /** A request answered without a stream (embeddings, rerank): its usage for the request-finished event. */
  answered(promptTokens: number): void {
    this.outcome.answered(promptTokens);
    this.step('worker-ended');
  }

  /** Records a failure; the HTTP status changes only if the response had not started. */
  fail(error: CortexError, responseStarted: boolean): void {
    this.outcome.fail(error, responseStarted);
  }

  /**
   * Publishes the request-finished event once (metrics count from it) and reports the run's usage to
   * its request's meter. A stream stopped before its end is recorded once its worker's last event came
   * or TAIL_MS passed.
   */
  finish(): void {
    if (this.phase === 'finished') return;
    if (this.placement)
      this.attempts.stopReading(
        this.placement.workerId,
        this.outcome.failedWith ? `the request failed (${this.outcome.failedWith})` : 'the gateway stopped reading',
      );
    this.step('finish');
    this.attempts.finished();
    this.outcome.whenSettled(
      () => this.checkpoint.state.promptTokens,
      () => this.record(),
    );
  }

  private record(): void {
    const { request, target } = this.input;
    const { usage, timings, ...ended } = this.outcome.fields;
    const event: RequestFinishedEvent = {
      requestId: this.requestId,
      model: this.placement?.model ?? request?.model ?? target?.model ?? 'unknown',
      workerId: this.placement?.workerId ?? null,
      dialect: this.dialect,
      stream: request?.stream ?? false,
      ...ended,
      usage,
      // A moved stream's timings are its last worker's alone (its time to first token is the resume's):
      // they would skew the latency histograms, which describe unbroken streams.
      timings: this.checkpoint.moves > 0 ? null : timings,
      durationMs: Date.now() - this.startedAt,
      finishedAt: Date.now(),
      coldStart: this.placement?.coldStart ?? false,
      placeMs: this.hops.placeMs,
      hops: this.hops.written,
      ...(this.checkpoint.moves > 0 && { migrations: this.checkpoint.moves }),
      // The tier it ran at, for queue wait by tier (metrics); a request refused before it was given one has none.
      ...(this.context.priority && { tier: this.context.priority.tier }),
    };
    this.trace.run(() => this.services.recorder.record(event, this.runId, this.meter?.payer ?? null));
    this.trace.finished(event);
    this.outcome.reported();
  }

  /** The stream from its first token on, as the client reads it (see RunStream). */
  private track(head: StreamEvent[], rest: AsyncIterator<StreamEvent>): AsyncIterable<StreamEvent> {
    return new RunStream({
      services: this.services,
      requestId: this.requestId,
      request: this.required(),
      attempts: this.attempts,
      checkpoint: this.checkpoint,
      notices: this.notices,
      stopped: this.stopped.signal,
      observe: (event) => this.observe(event),
      step: (step) => this.step(step),
    }).read(head, rest);
  }

  private observe(event: StreamEvent): StreamEvent {
    this.checkpoint.delivered(event);
    this.outcome.observe(event);
    if (event.type === 'finish' || event.type === 'error') this.step('worker-ended');
    return event;
  }

  /** Moves the run on by `step`; a step its phase does not allow is a bug, logged and ignored. */
  private step(step: RunStep): void {
    const next = nextPhase(this.phase, step);
    if (next === null) {
      this.services.logger.warn({
        msg: `run ${this.runId}: '${step}' may not happen while it is ${this.phase}; ignored (a bug: please report it)`,
        requestId: this.requestId,
      });
      return;
    }
    this.phase = next;
  }

  private required(): CanonicalRequest {
    if (!this.input.request) throw new Error('decode() must run before start()');
    return this.input.request;
  }
}
