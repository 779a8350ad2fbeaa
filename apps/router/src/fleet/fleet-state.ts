import { heartbeatFresh, REMOTE_DEVICE, workerPresence, type Heartbeat, type LoadedModel } from '@cortex/contracts';

/**
 * How long a claim this router made about a worker's models (a load started or finished, a model
 * dropped) outranks that worker's heartbeats: a heartbeat built just before the change may arrive
 * just after it. The claim stands until the first heartbeat received after this window.
 */
export const CLAIM_MS = 1_500;

/** A model as placement sees it: the worker's report, or this router's claim over it. */
export interface ModelView extends Readonly<LoadedModel> {
  /** Set while another model waits to replace this one: when it stops taking new requests. */
  readonly closingUntil?: number;
}

/** One worker as placement sees it, at one moment. Never mutated; a new one is built per read. */
export interface WorkerState {
  readonly workerId: string;
  readonly draining: boolean;
  /** A remote worker (`worker.engine: remote`): it serves the catalogue's upstream models, and only those. */
  readonly remote: boolean;
  /** The worker's free memory less what this router's claims take that the worker has not counted yet. */
  readonly freeBytes: number;
  readonly models: readonly ModelView[];
}

interface Observation {
  readonly beat: Readonly<Heartbeat>;
  readonly receivedAt: number;
}

/** A model claim: the model as this router expects it (null: dropped), and when it was made. */
interface ModelClaim {
  readonly model: LoadedModel | null;
  readonly at: number;
}

/**
 * The fleet as one router knows it: read-only observations (the last heartbeat of each worker) and
 * this router's own claims over them, each with its expiry, kept apart so every read states which
 * wins. Pure state, no bus: the registry feeds it and placement reads it.
 */
export class FleetState {
  private readonly observed = new Map<string, Observation>();
  /** Models claimed per worker: loading or loaded by this router, or dropped by it. */
  private readonly claims = new Map<string, Map<string, ModelClaim>>();
  /** Models closing per worker (victims of a planned load) → when they stop taking new requests. */
  private readonly closing = new Map<string, Map<string, number>>();
  /** When this router last placed a request on each worker's model: last use only moves forward. */
  private readonly used = new Map<string, Map<string, number>>();

  /** Records a heartbeat. Returns whether the worker was unknown or down before it. */
  observe(beat: Heartbeat, now: number): boolean {
    const known = this.observed.get(beat.workerId);
    const cameUp = !known || !this.isUp(known, now);
    this.observed.set(beat.workerId, { beat, receivedAt: now });
    const claims = this.claims.get(beat.workerId);
    for (const [id, claim] of claims ?? []) {
      // A heartbeat that shows a claimed model ready says more (in-flight, capabilities) than the claim.
      const superseded = claim.model !== null && beat.models.some((m) => m.id === id && m.state === 'ready');
      if (now - claim.at > CLAIM_MS || superseded) claims?.delete(id);
    }
    const used = this.used.get(beat.workerId);
    for (const id of used?.keys() ?? []) {
      if (!beat.models.some((m) => m.id === id) && !claims?.has(id)) used?.delete(id);
    }
    return cameUp;
  }

  /**
   * Forgets a worker and this router's claims over it: it said goodbye, or it was silent past the
   * forget window. Returns whether it was known. A heartbeat from it later brings it back as new.
   */
  forget(workerId: string): boolean {
    this.claims.delete(workerId);
    this.closing.delete(workerId);
    this.used.delete(workerId);
    return this.observed.delete(workerId);
  }

  /** Forgets the workers silent for `forgetAfterMs` or more (see workerPresence); returns them with how long each was silent. */
  forgetSilent(now: number, forgetAfterMs: number): Array<{ workerId: string; silentMs: number }> {
    const forgotten: Array<{ workerId: string; silentMs: number }> = [];
    for (const [workerId, entry] of this.observed) {
      const silentMs = now - entry.receivedAt;
      if (workerPresence(entry.beat, silentMs, forgetAfterMs) !== 'forgotten') continue;
      this.forget(workerId);
      forgotten.push({ workerId, silentMs });
    }
    return forgotten;
  }

  /** Claims a model state on a worker ahead of its heartbeats (null: the router dropped the model). */
  claimModel(workerId: string, model: LoadedModel | null, id: string, now: number): void {
    const reported = this.observed.get(workerId)?.beat.models.find((m) => m.id === id);
    const claims = this.claims.get(workerId);
    if (model && reported?.state === 'ready') {
      claims?.delete(id);
      return;
    }
    if (claims) claims.set(id, { model, at: now });
    else this.claims.set(workerId, new Map([[id, { model, at: now }]]));
  }

  /** A request was just placed on this model: the most recently used now, before a heartbeat says so. */
  touch(workerId: string, id: string, now: number): void {
    const used = this.used.get(workerId);
    if (used) used.set(id, now);
    else this.used.set(workerId, new Map([[id, now]]));
  }

  /** Marks a planned load's victim: it keeps taking requests until `until`, then drains. */
  claimClosing(workerId: string, id: string, until: number): void {
    const closing = this.closing.get(workerId);
    if (closing) closing.set(id, until);
    else this.closing.set(workerId, new Map([[id, until]]));
  }

  releaseClosing(workerId: string, id: string): void {
    this.closing.get(workerId)?.delete(id);
  }

  isUp(entry: Observation, now: number): boolean {
    return heartbeatFresh(entry.beat.intervalMs, now - entry.receivedAt);
  }

  /** Workers whose heartbeats stopped: id, the last heartbeat and how long ago it came. */
  silent(now: number): Array<{ workerId: string; beat: Readonly<Heartbeat>; silentMs: number }> {
    return [...this.observed.values()]
      .filter((entry) => !this.isUp(entry, now))
      .map((entry) => ({ workerId: entry.beat.workerId, beat: entry.beat, silentMs: now - entry.receivedAt }));
  }

  /** Whether this worker's heartbeats are fresh (draining or not). */
  heartbeating(workerId: string, now: number): boolean {
    const entry = this.observed.get(workerId);
    return entry !== undefined && this.isUp(entry, now);
  }

  lastBeat(workerId: string): Readonly<Heartbeat> | undefined {
    return this.observed.get(workerId)?.beat;
  }

  /** Workers that may take new requests, claims applied. */
  available(now: number): WorkerState[] {
    return [...this.observed.values()]
      .filter((entry) => this.isUp(entry, now) && !entry.beat.draining)
      .map((entry) => this.state(entry));
  }

  /** Every worker seen and not forgotten, up or not, claims applied (for `cortex status`). */
  all(now: number): Array<{ state: WorkerState; beat: Readonly<Heartbeat>; up: boolean; silentMs: number }> {
    return [...this.observed.values()].map((entry) => ({
      state: this.state(entry),
      beat: entry.beat,
      up: this.isUp(entry, now),
      silentMs: now - entry.receivedAt,
    }));
  }

  private state({ beat }: Observation): WorkerState {
    const claims = this.claims.get(beat.workerId);
    const closing = this.closing.get(beat.workerId);
    const used = this.used.get(beat.workerId);
    let freeBytes = beat.memory.freeBytes;
    const models: LoadedModel[] = beat.models.filter((m) => !claims?.has(m.id));
    for (const [id, claim] of claims ?? []) {
      if (!claim.model) continue;
      // A load the worker has not started (or not sized) yet is not in its memory figures.
      if (!beat.models.find((m) => m.id === id)?.sizeBytes)
        freeBytes = Math.max(0, freeBytes - (claim.model.sizeBytes ?? 0));
      models.push(claim.model);
    }
    return {
      workerId: beat.workerId,
      draining: beat.draining,
      remote: beat.device.kind === REMOTE_DEVICE,
      freeBytes,
      models: models.map((m) => {
        const closingUntil = closing?.get(m.id);
        const lastUsedAt = Math.max(m.lastUsedAt, used?.get(m.id) ?? 0);
        return { ...m, lastUsedAt, ...(closingUntil !== undefined && { closingUntil }) };
      }),
    };
  }
}
