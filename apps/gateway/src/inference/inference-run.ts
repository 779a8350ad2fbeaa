import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { StreamReader, untilFirstToken } from '@cortex/bus';
import {
  backgroundSubject,
  CortexError,
  streamSubject,
  Subjects,
  workerSubject,
  type CanonicalRequest,
  type Dialect,
  type GenerateCommand,
  type LoadProgress,
  type ModelKind,
  type Placement,
  type RetrievalApi,
  type RequestFinishedEvent,
  type Resume,
  type StreamEvent,
  type TokenCount,
  decodeGenerateAccepted,
  decodeTokenCount,
  livenessWindowMs,
  withSamplingDefaults,
  withSeed,
} from '@cortex/contracts';
import { promptPrefixes } from '@cortex/wire';
import type { EarlyPlacement } from './placement-client.js';
import { decideMigration } from './migration.decider.js';
import { FALLS_BACK, Tries } from './retry.js';
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

/**
 * How long a run stopped before its stream ended (its client gone, a failure) waits for its worker's
 * last event, whose usage says what it generated; past it the run is charged what its client was given.
 */
export const TAIL_MS = 2_000;

/** One try of a run: its id on the bus, where it was placed, and the stream it reads. */
interface Attempt {
  /** A new one for each try, so a replaced worker's late events never reach the next try's stream. */
  readonly runId: string;
  /** Where the try runs; a new try keeps the last one's until it is placed. */
  placement: Placement | null;
  /** The subject of its events, once it started. */
  subject: string | null;
  reader: StreamReader | null;
}

/** What the run was asked: a decoded request, or a model and kind for one with no translated body. */
interface RunInput {
  request: CanonicalRequest | null;
  /** Dialect state from the translator (see DecodedRequest). */
  state: unknown;
  /** The router's answer to the ready-only ask sent while the body decoded. */
  early: EarlyPlacement | null;
  /** A request with no translated body (embeddings, rerank): the model it names and the kind it needs. */
  target: { model: string; kind: ModelKind } | null;
  /** A background response's id: events go to its kept subject, and the worker runs it unwatched. */
  backgroundOf: string | null;
  /** The model of the requested one's `fallback` chain that serves it now; null: the requested model. */
  fallback: string | null;
}

/** One request on its way through translator → router → worker, and back as events. */
export class InferenceRun {
  readonly startedAt = Date.now();
  private attempt: Attempt = { runId: newRunId(), placement: null, subject: null, reader: null };
  private readonly input: RunInput = {
    request: null,
    state: undefined,
    early: null,
    target: null,
    backgroundOf: null,
    fallback: null,
  };
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
    return this.attempt.runId;
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
    return this.attempt.placement;
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
    this.input.backgroundOf = responseId;
  }

  /** The subject of the current try's events; null before one started. */
  get subject(): string | null {
    return this.attempt.subject;
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
    this.input.early = decoded.early;
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
        workerId = await this.placeGeneration(tries.exclude, tries.workerWaitMs());
      } catch (error) {
        // No place for the model: its fallback, if it has one left, else the failure stands.
        this.fallBack(await tries.after(tries.placementFailed(error), null, this.stopped.signal.aborted));
        this.retry();
        continue;
      }
      // Cancelled while the router answered: nothing has started, so nothing runs for nobody.
      if (this.stopped.signal.aborted)
        throw new CortexError('cancelled', 'the request was cancelled while it was placed');
      let reader: StreamReader | null = null;
      this.trace.attempt(this.placement as Placement);
      try {
        reader = await this.trace.run(() => this.launch(workerId));
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
        if (reader) this.stopReading(workerId, `the gateway stopped reading: ${(error as Error).message}`, false);
        const message = (error as Error).message;
        // The worker is fine but its model just went (swapped out between placement and generate):
        // the router knows by now, so ask again without holding it against the worker.
        const next = await tries.after(error, workerId, this.stopped.signal.aborted);
        if (next === 'replace')
          this.services.logger.log({ msg: `${message}; placing the request again`, requestId: this.requestId });
        else if (typeof next === 'object') this.fallBack(next, message);
        else
          this.services.logger.warn({
            msg: `worker ${workerId} failed before the first token (${message}); placing the request again`,
            requestId: this.requestId,
          });
        this.retry();
      }
    }
  }

  /**
   * After a placement or try that failed with the model's next fallback to go to: the run goes on with
   * that model (its usage and spend are that model's, and the client is told which).
   */
  private fallBack(next: 'replace' | 'elsewhere' | { fallback: string }, why?: string): void {
    if (typeof next !== 'object') return;
    const from = this.input.fallback ?? this.required().model;
    this.services.logger.warn({
      msg: `${from} cannot serve the request${why ? ` (${why})` : ''}; falling back to ${next.fallback}`,
      requestId: this.requestId,
    });
    this.input.fallback = next.fallback;
    this.attempt.placement = null;
  }

  /** The model serving the request in place of the one it asked for (its catalogue `fallback`), once one does. */
  get servedBy(): string | null {
    return this.input.fallback === null ? null : (this.placement?.model ?? this.input.fallback);
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
      const workerId = await this.placeOrWait(tries.exclude);
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
    await this.trace.run(() => this.placeOrWait(exclude));
    this.step('run');
    return this.placement as Placement;
  }

  /**
   * A generation's placement, with its conversation (affinity key, prompt prefixes) so a follow-up
   * goes where its prompt was evaluated; shown in the console's rows (waiting, then on its worker)
   * until the run's finish.
   */
  private async placeGeneration(exclude: string[], workerWaitMs?: number): Promise<string> {
    const request = this.required();
    let prefixes: string[] | undefined;
    this.services.pending.placing(
      this,
      this.requestId,
      this.runId,
      request.model,
      Date.now(),
      this.meter?.payer ?? null,
    );
    const workerId = await this.placeOrWait(
      exclude,
      { affinity: request.affinityKey, prefixes: () => (prefixes ??= promptPrefixes(request)) },
      workerWaitMs,
    );
    this.services.pending.placed(this, workerId);
    return workerId;
  }

  /** Places the request (a cold load included) and notes where and how long it took; `workerWaitMs` see PlaceAsk. */
  private async placeOrWait(
    exclude: string[],
    conversation: { affinity?: string | undefined; prefixes?: () => string[] } = {},
    workerWaitMs?: number,
  ): Promise<string> {
    const model = this.input.target?.model ?? this.input.fallback ?? this.required().model;
    const kind = this.input.target?.kind;
    const started = performance.now();
    const { affinity, prefixes } = conversation;
    const ask = {
      model,
      runId: this.runId,
      requestId: this.requestId,
      exclude,
      ...(affinity && { affinity }),
      ...(prefixes && { prefixes }),
      ...(kind && { kind }),
      onLoadProgress: this.notices.heard
        ? (progress: LoadProgress) => this.notices.emit({ type: 'loading', progress })
        : null,
      signal: this.stopped.signal,
      workerWaitMs,
    };
    const { placement, ms } = await this.services.placer.place(ask, this.input.early);
    this.input.early = null;
    // A reused answer asked no router (ms null): the router round-trip metric only counts real asks.
    this.hops.placed(started, ms);
    this.attempt.placement = placement;
    return placement.workerId;
  }

  private async launch(workerId: string, resume?: Resume, request = this.required()): Promise<StreamReader> {
    // The subject names the worker: NATS lets no other worker's user write it.
    const { backgroundOf } = this.input;
    const subject = backgroundOf
      ? backgroundSubject(backgroundOf, workerId, this.runId)
      : streamSubject(workerId, this.runId);
    this.attempt.subject = subject;
    // Subscribe before asking the worker to start, so no early event is missed.
    const reader = new StreamReader(this.services.bus.nc, subject, {
      idleTimeoutMs: this.services.config.gateway.streamIdleTimeoutMs,
    });
    this.attempt.reader = reader;
    const model = this.placement?.model ?? request.model;
    const priority = this.context.priority;
    // The catalogue's sampling defaults as the live catalogue has them now, under what the request set (the worker adds the GGUF's).
    const sampling = withSamplingDefaults(request.sampling, this.services.catalogue.find(model)?.sampling);
    const command: GenerateCommand = {
      runId: this.runId,
      streamSubject: subject,
      request: { ...request, model, sampling },
      ...(backgroundOf && { background: true }),
      ...(priority && { priority }),
      ...(resume && { resume }),
    };
    const sent = performance.now();
    try {
      await this.services.bus.request(workerSubject(Subjects.workerGenerate, workerId), command, {
        requestId: this.requestId,
        decode: decodeGenerateAccepted,
      });
      this.hops.accepted(sent);
    } catch (error) {
      reader.close();
      // Unanswered (a stalled worker) is not refused: if it runs the command later, it stops at once.
      if (error instanceof CortexError && error.code === 'timeout')
        this.services.bus.publish(
          workerSubject(Subjects.workerCancel, workerId),
          { runId: this.runId, reason: 'generate went unanswered' },
          this.requestId,
        );
      throw error;
    }
    reader.arm();
    this.services.streams.watch(this.runId, workerId, reader);
    return reader;
  }

  /** The client went away: end every wait and stop the worker so the slot frees at once. */
  cancel(reason: string): void {
    this.stopped.abort();
    if (this.phase === 'finished') return;
    this.outcome.cancelled();
    if (!this.placement || !this.attempt.reader) return;
    this.stopReading(this.placement.workerId, reason);
  }

  /**
   * Stops reading the current stream and tells its worker to stop generating, whatever made the
   * gateway give up (client gone, idle timeout, worker declared down, a failure while rendering).
   * A worker that is really gone never hears it; one that is only slow frees its slot at once
   * instead of after the watch lapses. With `charge`, the worker's last event is still awaited
   * (see TAIL_MS): the cancelled run's finish says what it generated, which the request pays for.
   */
  private stopReading(workerId: string, reason: string, charge = true): void {
    const reader = this.attempt.reader;
    if (!reader) return;
    this.attempt.reader = null;
    this.services.streams.unwatch(this.runId);
    if (streamEnded(this.phase)) return reader.close();
    this.services.bus.publish(
      workerSubject(Subjects.workerCancel, workerId),
      { runId: this.runId, reason },
      this.requestId,
    );
    if (charge) this.outcome.awaitLast(reader.last(TAIL_MS));
    else reader.close();
  }

  /** The first token's frame is on the client's socket: the last hop of time to first byte. */
  firstByteWritten(): void {
    this.hops.firstByteWritten();
  }

  /** A background run has its first token: stop reading and leave it to run on the worker (no cancel). */
  detach(): void {
    this.step('detach');
    if (this.placement) this.stopReading(this.placement.workerId, 'detached');
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
      this.stopReading(
        this.placement.workerId,
        this.outcome.failedWith ? `the request failed (${this.outcome.failedWith})` : 'the gateway stopped reading',
      );
    this.step('finish');
    this.services.pending.done(this);
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

  /**
   * The buffered head, then the rest of the stream, noting the finish for the request-finished event.
   * A worker lost on the way costs the client a pause where the stream may move (see migrate): it goes
   * on from another worker, whose own start event only says where it resumed.
   */
  private async *track(head: StreamEvent[], rest: AsyncIterator<StreamEvent>): AsyncIterable<StreamEvent> {
    for (const event of head) yield this.observe(event);
    const lost: string[] = [];
    for (;;) {
      let next: IteratorResult<StreamEvent>;
      try {
        next = await rest.next();
      } catch (error) {
        rest = await this.migrate(error, lost);
        continue;
      }
      if (next.done) return;
      const event = next.value;
      if (event.type === 'start' && this.checkpoint.moves > 0) {
        this.notices.emit({ type: 'resumed', workerId: event.workerId });
        continue;
      }
      // An upstream that failed mid-answer ends its stream with an error: the stream may move as from a lost worker.
      if (event.type === 'error' && event.error.code === 'upstream_unavailable') {
        const failure = CortexError.fromBody(event.error);
        const moved = await this.migrate(failure, lost).catch((error: unknown) => {
          if (error === failure) return null;
          throw error;
        });
        if (moved) {
          rest = moved;
          continue;
        }
      }
      yield this.observe(event);
    }
  }

  /**
   * The stream's place failed after the first token (its worker lost, its upstream failing): where
   * decideMigration allows it, the request is placed again (never on a worker lost before) and goes
   * on from the checkpoint — from its token ids on another copy, or from its text as an answer begun
   * on another place or, with none, the model's next fallback — and the new stream is read in place
   * of the old one. Otherwise, or when no place takes it, `error` stands.
   */
  private async migrate(error: unknown, lost: string[]): Promise<AsyncIterator<StreamEvent>> {
    if (!(error instanceof CortexError) || !this.placement) throw error;
    const request = this.required();
    const decision = decideMigration({
      error,
      cancelled: this.stopped.signal.aborted,
      checkpoint: this.checkpoint.state,
      config: this.services.config.gateway.migration,
      request,
    });
    const from = this.placement.workerId;
    const place = error.code === 'worker_lost' ? `worker ${from}` : `the upstream on worker ${from}`;
    if (!decision.migrate) {
      if (error.code === 'worker_lost' || error.code === 'upstream_unavailable')
        this.services.logger.warn({
          msg: `${place} was lost mid-stream; the stream does not move: ${decision.reason}`,
          requestId: this.requestId,
        });
      throw error;
    }
    // The next worker counts the delivered output again as it replays it: the lost one is not charged.
    this.step('lost');
    this.stopReading(from, `the stream moves to another worker: ${error.message}`, false);
    this.services.placer.forget(from);
    lost.push(from);
    this.checkpoint.moved();
    this.notices.emit({ type: 'moving' });
    this.retry();
    const resume = decision.from === 'tokens' ? this.checkpoint.resume() : undefined;
    const prefill = decision.from === 'text' ? this.checkpoint.prefill() : '';
    // Text goes on in any model: with no other place for this one, its fallbacks are tried in turn.
    const fallbacks = decision.from === 'text' ? this.fallbacksLeft() : [];
    try {
      // The client is already waiting: a live worker briefly declared down (its heartbeats late while it
      // loads a model on a busy host) is waited for one liveness window, not `worker_wait_ms`.
      // With a fallback left, no place for the model now sends the stream on to it at once.
      const window = Math.min(
        this.services.config.gateway.workerWaitMs,
        livenessWindowMs(this.services.config.worker.heartbeatMs),
      );
      let workerId: string;
      for (;;) {
        try {
          workerId = await this.placeGeneration(lost, fallbacks.length > 0 ? 0 : window);
          break;
        } catch (failure) {
          const next = fallbacks.shift();
          if (next === undefined || !(failure instanceof CortexError) || !FALLS_BACK.has(failure.code)) throw failure;
          this.fallBack({ fallback: next }, failure.message);
          // The next model's places are its own: of those that failed, only a lost worker is kept out.
          lost.splice(0, lost.length, ...(error.code === 'worker_lost' ? [from] : []));
        }
      }
      if (this.stopped.signal.aborted) throw new CortexError('cancelled', 'the request was cancelled while it moved');
      const reader = await this.launch(workerId, resume, resume ? request : this.begun(request, prefill));
      this.step('resumed');
      this.services.logger.warn({
        msg:
          `${place} was lost mid-stream (${error.message}); the stream goes on on ${workerId} after ` +
          (resume ? `${resume.tokens.length} tokens` : `${prefill.length} characters, as an answer begun`),
        requestId: this.requestId,
      });
      return reader[Symbol.asyncIterator]();
    } catch (failure) {
      if (failure instanceof CortexError && failure.code === 'cancelled') throw failure;
      this.services.logger.warn({
        msg: `${place} was lost mid-stream and no other place went on with it: ${(failure as Error).message}`,
        requestId: this.requestId,
      });
      throw error;
    }
  }

  /** The request going on from the text the client has: an answer begun, its budget less what was given. */
  private begun(request: CanonicalRequest, prefill: string): CanonicalRequest {
    const { maxTokens } = request.sampling;
    const given = this.checkpoint.state.textPieces;
    return {
      ...request,
      prefill: (request.prefill ?? '') + prefill,
      sampling: { ...request.sampling, ...(maxTokens !== undefined && { maxTokens: Math.max(1, maxTokens - given) }) },
    };
  }

  /** The asked model's fallbacks after the one serving now (all of them while the asked model serves). */
  private fallbacksLeft(): string[] {
    const chain = this.services.catalogue.find(this.required().model)?.fallback ?? [];
    const serving = this.input.fallback;
    return serving === null ? [...chain] : chain.slice(chain.indexOf(serving) + 1);
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

  /** A new try: a new run id on the bus; the last placement stands until the try is placed. */
  private retry(): void {
    this.attempt = { runId: newRunId(), placement: this.attempt.placement, subject: null, reader: null };
  }
}

function newRunId(): string {
  return randomBytes(12).toString('hex');
}
