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
  type GenerateCommand,
  type LoadProgress,
  type ModelKind,
  type Placement,
  type Resume,
  type UsageOwner,
  decodeGenerateAccepted,
  withSamplingDefaults,
} from '@cortex/contracts';
import { promptPrefixes } from '@cortex/wire';
import type { RequestContext } from '../http/request-context.js';
import type { EarlyPlacement } from './placement-client.js';
import type { RunHops } from './run-hops.js';
import type { RunNotices } from './run-notices.js';
import type { RunOutcome } from './run-outcome.js';
import type { RunServices } from './run-services.js';

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

/** The parts of a run its attempts work with (see InferenceRun). */
export interface AttemptsDeps {
  readonly services: RunServices;
  /** The request's id, arrival, headers and tier (see RequestContext). */
  readonly context: RequestContext;
  readonly hops: RunHops;
  readonly notices: RunNotices;
  readonly outcome: RunOutcome;
  /** Aborted when the client goes, to end waits that no longer serve anyone. */
  readonly stopped: AbortSignal;
  /** Who pays for the run, shown in its console row (none: nobody settles a budget with it). */
  readonly payer: UsageOwner | null;
  /** Whether the run's stream has ended on its own (see streamEnded): one read no more is then only closed. */
  streamEnded(): boolean;
}

/**
 * A run's tries on the bus, one at a time: each placed (the router asked, a cold load waited for),
 * started on its worker (its stream subscribed before the generate command goes) and stopped; and
 * the model of the requested one's `fallback` chain they go to.
 */
export class RunAttempts {
  private attempt: Attempt = { runId: newRunId(), placement: null, subject: null, reader: null };
  /** The router's answer to the ready-only ask sent while the body decoded; the first placement uses it. */
  early: EarlyPlacement | null = null;
  /** A background response's id: events go to its kept subject, and the worker runs it unwatched. */
  backgroundOf: string | null = null;
  /** The model of the requested one's `fallback` chain that serves it now; null: the requested model. */
  private fallback: string | null = null;

  constructor(private readonly deps: AttemptsDeps) {}

  /** The current try's id on the bus. */
  get runId(): string {
    return this.attempt.runId;
  }

  /** Where the current try runs; null before it was placed. */
  get placement(): Placement | null {
    return this.attempt.placement;
  }

  /** The subject of the current try's events; null before one started. */
  get subject(): string | null {
    return this.attempt.subject;
  }

  /** A new try: a new run id on the bus; the last placement stands until the try is placed. */
  next(): void {
    this.attempt = { runId: newRunId(), placement: this.attempt.placement, subject: null, reader: null };
  }

  /**
   * After a placement or try that failed with the model's next fallback to go to: the run goes on with
   * that model (its usage and spend are that model's, and the client is told which). `asked` is the
   * model the request named.
   */
  fallBack(asked: string, next: 'replace' | 'elsewhere' | { fallback: string }, why?: string): void {
    if (typeof next !== 'object') return;
    const from = this.serving(asked);
    this.deps.services.logger.warn({
      msg: `${from} cannot serve the request${why ? ` (${why})` : ''}; falling back to ${next.fallback}`,
      requestId: this.deps.context.id,
    });
    this.fallback = next.fallback;
    this.attempt.placement = null;
  }

  /** The model a try of `asked` goes to: its fallback once one serves. */
  serving(asked: string): string {
    return this.fallback ?? asked;
  }

  /** The model serving the request in place of the one it asked for (its catalogue `fallback`), once one does. */
  get servedBy(): string | null {
    return this.fallback === null ? null : (this.placement?.model ?? this.fallback);
  }

  /** The asked model's fallbacks after the one serving now (all of them while the asked model serves). */
  fallbacksLeft(asked: string): string[] {
    const chain = this.deps.services.catalogue.find(asked)?.fallback ?? [];
    const serving = this.fallback;
    return serving === null ? [...chain] : chain.slice(chain.indexOf(serving) + 1);
  }

  /**
   * A generation's placement, with its conversation (affinity key, prompt prefixes) so a follow-up
   * goes where its prompt was evaluated; shown in the console's rows (waiting, then on its worker)
   * until the run's finish.
   */
  async placeGeneration(request: CanonicalRequest, exclude: string[], workerWaitMs?: number): Promise<string> {
    const { services, context, payer } = this.deps;
    let prefixes: string[] | undefined;
    services.pending.placing(this, context.id, this.runId, request.model, Date.now(), payer);
    const workerId = await this.placeOrWait(
      { model: this.serving(request.model) },
      exclude,
      { affinity: request.affinityKey, prefixes: () => (prefixes ??= promptPrefixes(request)) },
      workerWaitMs,
    );
    services.pending.placed(this, workerId);
    return workerId;
  }

  /** The run is over: its console row goes. */
  finished(): void {
    this.deps.services.pending.done(this);
  }

  /**
   * Places the request on a worker holding `model` (of `kind`, for one with no translated body), a
   * cold load included, and notes where and how long it took; `workerWaitMs` see PlaceAsk.
   */
  async placeOrWait(
    { model, kind }: { model: string; kind?: ModelKind },
    exclude: string[],
    conversation: { affinity?: string | undefined; prefixes?: () => string[] } = {},
    workerWaitMs?: number,
  ): Promise<string> {
    const { services, context, hops, notices } = this.deps;
    const started = performance.now();
    const { affinity, prefixes } = conversation;
    const ask = {
      model,
      runId: this.runId,
      requestId: context.id,
      exclude,
      ...(affinity && { affinity }),
      ...(prefixes && { prefixes }),
      ...(kind && { kind }),
      onLoadProgress: notices.heard ? (progress: LoadProgress) => notices.emit({ type: 'loading', progress }) : null,
      signal: this.deps.stopped,
      workerWaitMs,
    };
    const { placement, ms } = await services.placer.place(ask, this.early);
    this.early = null;
    // A reused answer asked no router (ms null): the router round-trip metric only counts real asks.
    hops.placed(started, ms);
    this.attempt.placement = placement;
    return placement.workerId;
  }

  /** Starts the try on `workerId` (going on from `resume`, a lost worker's tokens, when given) and reads its stream. */
  async launch(workerId: string, request: CanonicalRequest, resume?: Resume): Promise<StreamReader> {
    const { services, context, hops } = this.deps;
    // The subject names the worker: NATS lets no other worker's user write it.
    const { backgroundOf } = this;
    const subject = backgroundOf
      ? backgroundSubject(backgroundOf, workerId, this.runId)
      : streamSubject(workerId, this.runId);
    this.attempt.subject = subject;
    // Subscribe before asking the worker to start, so no early event is missed.
    const reader = new StreamReader(services.bus.nc, subject, {
      idleTimeoutMs: services.config.gateway.streamIdleTimeoutMs,
    });
    this.attempt.reader = reader;
    const model = this.placement?.model ?? request.model;
    const priority = context.priority;
    // The catalogue's sampling defaults as the live catalogue has them now, under what the request set (the worker adds the GGUF's).
    const sampling = withSamplingDefaults(request.sampling, services.catalogue.find(model)?.sampling);
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
      await services.bus.request(workerSubject(Subjects.workerGenerate, workerId), command, {
        requestId: context.id,
        decode: decodeGenerateAccepted,
      });
      hops.accepted(sent);
    } catch (error) {
      reader.close();
      // Unanswered (a stalled worker) is not refused: if it runs the command later, it stops at once.
      if (error instanceof CortexError && error.code === 'timeout')
        services.bus.publish(
          workerSubject(Subjects.workerCancel, workerId),
          { runId: this.runId, reason: 'generate went unanswered' },
          context.id,
        );
      throw error;
    }
    reader.arm();
    services.streams.watch(this.runId, workerId, reader);
    return reader;
  }

  /**
   * Stops reading the current stream and tells its worker to stop generating, whatever made the
   * gateway give up (client gone, idle timeout, worker declared down, a failure while rendering).
   * A worker that is really gone never hears it; one that is only slow frees its slot at once
   * instead of after the watch lapses. With `charge`, the worker's last event is still awaited
   * (see TAIL_MS): the cancelled run's finish says what it generated, which the request pays for.
   */
  stopReading(workerId: string, reason: string, charge = true): void {
    const { services, context, outcome } = this.deps;
    const reader = this.attempt.reader;
    if (!reader) return;
    this.attempt.reader = null;
    services.streams.unwatch(this.runId);
    if (this.deps.streamEnded()) return reader.close();
    services.bus.publish(workerSubject(Subjects.workerCancel, workerId), { runId: this.runId, reason }, context.id);
    if (charge) outcome.awaitLast(reader.last(TAIL_MS));
    else reader.close();
  }
}

function newRunId(): string {
  return randomBytes(12).toString('hex');
}
