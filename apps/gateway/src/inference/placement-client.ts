import { performance } from 'node:perf_hooks';
import { isBusConnected, type BusClient } from '@cortex/bus';
import type { GatewayConfig } from '@cortex/config';
import {
  CortexError,
  decodePlacement,
  Subjects,
  type LoadProgress,
  type ModelKind,
  type Placement,
  type PlaceRequest,
} from '@cortex/contracts';
import type { PlacementHint } from '@cortex/wire';
import type { WorkerEvents } from './worker-events.js';
import type { LoadProgressWatch } from './load-progress-watch.js';

/** How long one try of a placement waits for a router before asking again (a cold load spans many tries). */
const PLACE_TRY_MS = 2_000;

/** One run's question to the routers. */
export interface PlaceAsk {
  model: string;
  runId: string;
  requestId: string;
  /** Workers not to use (a retry after one of them failed). */
  exclude: string[];
  affinity?: string;
  /**
   * The prompt's prefixes, the whole prompt first (`promptPrefixes`); asked for only when a router is
   * asked (a reused answer needs none, and hashing the prompt is on the way to the first token).
   */
  prefixes?: () => string[];
  /** Absent or `chat`: a generating model. */
  kind?: ModelKind;
  /** Called with each progress step of a cold load the placement waits for. */
  onLoadProgress: ((progress: LoadProgress) => void) | null;
  /** Aborted when the client goes: every wait ends. */
  signal: AbortSignal;
  /** How long a `no_worker` answer waits for a worker to join; absent: `gateway.worker_wait_ms`. */
  workerWaitMs?: number;
}

/** A placement and the time the router took to answer it (a cold load included). */
export interface Placed {
  placement: Placement;
  /** Null for an answer reused without asking. */
  ms: number | null;
}

/** A ready-only ask sent while the body decodes, and the model and key it was asked with. */
export interface EarlyPlacement extends PlacementHint {
  placed: Promise<Placed | null>;
}

/** At most this many reusable answers are kept (one per model, kind and conversation); the oldest go first. */
const MAX_REUSABLE = 4_096;

/**
 * The gateway's side of placement: asking the router queue group, waiting for a first worker, and
 * reusing for a moment an answer the router marked reusable (`Placement.reuseMs`: only one worker
 * could serve the model).
 */
export class PlacementClient {
  /** Reusable answers by model, kind and conversation, with the time (performance.now) they lapse. */
  private readonly reusable = new Map<string, { placement: Placement; until: number }>();
  /** Models loaded or unloaded anywhere so far: an answer asked for before the last change is not kept. */
  private changes = 0;

  constructor(
    private readonly bus: BusClient,
    private readonly config: Pick<GatewayConfig, 'placementTimeoutMs' | 'workerWaitMs'>,
    private readonly workerEvents: WorkerEvents,
    private readonly progress: Pick<LoadProgressWatch, 'watch'>,
  ) {
    // A worker down, or a model loaded or unloaded anywhere: the answers that name them are not reused.
    workerEvents.onChange((change) =>
      change.type === 'down' ? this.forget(change.workerId) : this.forgetModel(change.model),
    );
  }

  /**
   * Right after start-up no worker may have joined yet: a `no_worker` answer waits (up to
   * `gateway.worker_wait_ms`, or until the client goes) for a worker-up event, then asks again.
   */
  async place(ask: PlaceAsk, early: EarlyPlacement | null = null): Promise<Placed> {
    // A retry that excludes workers always asks: the answer it would reuse is the one that failed.
    const key = ask.exclude.length === 0 ? reuseKey(ask.kind, ask.model, ask.affinity) : null;
    const reused = key === null ? undefined : this.reused(key);
    if (reused) return { placement: reused, ms: null };
    // A worker sends its heartbeat before its model-loaded or -unloaded event, so a router asked after
    // the event answers from the new view; one asked before it may not have.
    const changes = this.changes;
    const placed = await this.ask(ask, early);
    const { reuseMs } = placed.placement;
    if (key !== null && reuseMs && changes === this.changes)
      this.keep(key, { placement: { ...placed.placement, coldStart: false }, until: performance.now() + reuseMs });
    return placed;
  }

  /** Reusable answers that name this worker are dropped: it refused or failed a request, or went down. */
  forget(workerId: string): void {
    for (const [key, { placement }] of this.reusable) if (placement.workerId === workerId) this.reusable.delete(key);
  }

  /**
   * Reusable answers for this model are dropped: a worker loaded or unloaded it, so another worker may
   * serve it now, or this one no longer can.
   */
  forgetModel(model: string): void {
    this.changes++;
    for (const [key, { placement }] of this.reusable) if (placement.model === model) this.reusable.delete(key);
  }

  /** The answer kept under `key`, while it lasts. */
  private reused(key: string): Placement | undefined {
    const entry = this.reusable.get(key);
    if (!entry) return undefined;
    if (entry.until <= performance.now()) {
      this.reusable.delete(key);
      return undefined;
    }
    // While NATS is down the worker cannot hear the request either: ask, which says so after one try.
    return isBusConnected(this.bus.nc) ? entry.placement : undefined;
  }

  private keep(key: string, entry: { placement: Placement; until: number }): void {
    this.reusable.delete(key);
    if (this.reusable.size >= MAX_REUSABLE) {
      const now = performance.now();
      for (const [old, { until }] of this.reusable) if (until <= now) this.reusable.delete(old);
      if (this.reusable.size >= MAX_REUSABLE) this.reusable.delete(this.reusable.keys().next().value as string);
    }
    this.reusable.set(key, entry);
  }

  private async ask(ask: PlaceAsk, early: EarlyPlacement | null): Promise<Placed> {
    // The early answer serves a first placement of the same model and conversation. It was asked
    // before the prompt was known: without an affinity key, and with a choice of workers (the answer
    // not reusable), the prompt's prefixes may pick another.
    const fits = early && ask.exclude.length === 0 && early.model === ask.model && early.affinity === ask.affinity;
    const placed = fits ? await untilAborted(early.placed, ask.signal) : null;
    if (ask.signal.aborted) throw new CortexError('cancelled', 'the request was cancelled while it was placed');
    if (placed && (ask.affinity !== undefined || placed.placement.reuseMs !== undefined || !ask.prefixes?.().length))
      return placed;
    const deadline = performance.now() + (ask.workerWaitMs ?? this.config.workerWaitMs);
    for (;;) {
      // Counted before asking, so a worker that joins between the answer and the wait is not missed.
      const seen = this.workerEvents.ups;
      try {
        return await this.watched(ask);
      } catch (error) {
        if (!(error instanceof CortexError) || error.code !== 'no_worker') throw error;
        if (!ask.signal.aborted && (await this.workerEvents.upAfter(seen, deadline - performance.now(), ask.signal)))
          continue;
        // A client that left while it waited for a worker is a cancel, not a fleet with no worker.
        throw ask.signal.aborted
          ? new CortexError('cancelled', 'the request was cancelled while it waited for a worker')
          : error;
      }
    }
  }

  /**
   * Asks the router, while the translator decodes the body, for a worker that has the model the body
   * names ready now: the two answers come in parallel instead of one after the other. `place` uses
   * the answer only for the same model and key. Null when the model is ready nowhere, no router
   * answered in one try, or on any error: a ready-only ask never loads and never waits. Not asked
   * (null) when `place` will reuse an answer for the same model and key anyway.
   */
  askEarly(hint: PlacementHint, requestId: string): EarlyPlacement | null {
    if (this.reused(reuseKey(undefined, hint.model, hint.affinity))) return null;
    const started = performance.now();
    // No run id: a router from before `readyOnly` places it like any request, and must not make the
    // gateway's real `place` join that placement.
    const place: PlaceRequest = {
      model: hint.model,
      exclude: [],
      readyOnly: true,
      ...(hint.affinity && { affinity: hint.affinity }),
    };
    const placed = this.bus
      .request(Subjects.routerPlace, place, { decode: decodePlacement, requestId, timeoutMs: PLACE_TRY_MS })
      .then(
        (placement) => ({ placement, ms: performance.now() - started }),
        () => null,
      );
    return { ...hint, placed };
  }

  private async watched(ask: PlaceAsk): Promise<Placed> {
    const started = performance.now();
    const stopWatching = ask.onLoadProgress ? this.progress.watch(ask.model, ask.onLoadProgress) : null;
    try {
      const placement = await this.askRouter(ask);
      return { placement, ms: performance.now() - started };
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
  private async askRouter(ask: PlaceAsk): Promise<Placement> {
    const { model, exclude, runId, affinity, kind } = ask;
    const prefixes = ask.prefixes?.();
    const place: PlaceRequest = {
      model,
      exclude,
      runId,
      ...(affinity && { affinity }),
      ...(prefixes?.length && { prefixes }),
      ...(kind && kind !== 'chat' && { kind }),
    };
    const { placementTimeoutMs } = this.config;
    const deadline = Date.now() + placementTimeoutMs;
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.bus.request(
          Subjects.routerPlace,
          { ...place, attempt },
          {
            decode: decodePlacement,
            requestId: ask.requestId,
            timeoutMs: Math.max(1, Math.min(PLACE_TRY_MS, deadline - Date.now())),
          },
        );
      } catch (error) {
        // Only the bus's own timeout (it carries the NATS error as cause) means "no answer"; a router
        // that answers with an error (its own `timeout` included) has answered.
        const unanswered = error instanceof CortexError && error.code === 'timeout' && error.cause !== undefined;
        if (!unanswered || ask.signal.aborted) throw error;
        // No router can hear the next try either until NATS is back: say so now, not at the deadline.
        if (!isBusConnected(this.bus.nc)) {
          throw new CortexError(
            'service_unavailable',
            `the gateway has lost its NATS connection and is reconnecting; ${Subjects.routerPlace} went unanswered: try again shortly`,
            { retryAfter: 1, cause: error },
          );
        }
        if (Date.now() >= deadline)
          throw new CortexError('timeout', `${Subjects.routerPlace} did not answer within ${placementTimeoutMs} ms`, {
            cause: error,
          });
      }
    }
  }
}

/** Reused answers are kept per kind of model, model name and conversation. */
function reuseKey(kind: ModelKind | undefined, model: string, affinity: string | undefined): string {
  return `${kind ?? 'chat'}\n${model}\n${affinity ?? ''}`;
}

/** `promise`, or null as soon as `signal` aborts. */
function untilAborted<T>(promise: Promise<T | null>, signal: AbortSignal): Promise<T | null> {
  if (signal.aborted) return Promise.resolve(null);
  return new Promise((resolve) => {
    const onAbort = (): void => resolve(null);
    signal.addEventListener('abort', onAbort, { once: true });
    void promise.then((value) => {
      signal.removeEventListener('abort', onAbort);
      resolve(value);
    });
  });
}
