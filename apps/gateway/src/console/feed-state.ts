import type { LoadProgress, LoadTrigger, PendingRun, StreamEvent } from '@cortex/contracts';

/**
 * The console's live state as pure functions of what the bus said and when: no bus, no clock, no
 * timers (the caller passes `now`). `ConsoleFeed` feeds it while someone watches and drops it after.
 */

/**
 * `queued`: waiting for a router's answer or, placed, for a slot on its worker; `loading`: waiting for
 * its model to load; `prompt`: its stream started (the prompt is evaluated); `generating`: tokens flow;
 * `tool`: between model turns, an MCP tool its gateway runs for it.
 */
export type LiveState = 'queued' | 'loading' | 'prompt' | 'generating' | 'tool';

/** One request in flight on some worker, as its token stream shows it. */
export interface LiveRow {
  runId: string;
  /** Null until the stream's `start` event is seen (the feed began mid-stream). */
  model: string | null;
  workerId: string | null;
  state: LiveState;
  /** The MCP tool it waits on (`<server> · <tool>`) in state `tool`, else null. */
  tool: string | null;
  /** The stored key the request was made with, and its account (from its gateway); null when none or not known. */
  keyId: string | null;
  account: string | null;
  /** Whether its token stream has said anything yet (until then only its gateway knows of it). */
  streamed: boolean;
  promptTokens: number;
  /** Tokens so far: decoded pieces of text and reasoning (a merged delta says how many), tool events. */
  tokens: number;
  startedAt: number;
  firstTokenAt: number | null;
  lastEventAt: number;
}

export interface LiveView extends LiveRow {
  elapsedMs: number;
  /** Tokens per second since the first token; null before it. */
  tokensPerSecond: number | null;
}

/** At most this many rows: a flood of streams (or of junk subjects) cannot grow the feed without bound. */
export const MAX_LIVE_ROWS = 1_000;

/** The requests in flight across the fleet, from every stream's events. */
export class LiveRuns {
  private readonly rows = new Map<string, LiveRow>();
  /** Set when a row was added, changed or removed since the last `take`. */
  private dirty = false;

  apply(runId: string, event: StreamEvent, now: number): void {
    if (event.type === 'finish' || event.type === 'error') {
      if (this.rows.delete(runId)) this.dirty = true;
      return;
    }
    let row = this.rows.get(runId);
    // A worker keeps a queued request's stream alive before it starts: that says nothing about its state.
    if (event.type === 'keepalive') {
      if (row) row.lastEventAt = now;
      return;
    }
    if (!row) {
      if (this.rows.size >= MAX_LIVE_ROWS) return;
      row = {
        runId,
        model: null,
        workerId: null,
        state: 'prompt',
        tool: null,
        keyId: null,
        account: null,
        streamed: true,
        promptTokens: 0,
        tokens: 0,
        startedAt: now,
        firstTokenAt: null,
        lastEventAt: now,
      };
      this.rows.set(runId, row);
    }
    row.lastEventAt = now;
    if (!row.streamed) {
      row.streamed = true;
      row.state = 'prompt';
    }
    switch (event.type) {
      case 'start':
        row.model = event.model;
        row.workerId = event.workerId;
        row.promptTokens = event.promptTokens;
        break;
      case 'text':
      case 'reasoning':
      case 'tool_args':
      case 'tool_call':
        row.tokens += (event.type === 'text' || event.type === 'reasoning' ? event.pieces : undefined) ?? 1;
        row.state = 'generating';
        row.firstTokenAt ??= now;
        break;
    }
    this.dirty = true;
  }

  /**
   * What the gateways say they run: a request not streaming yet shows as `loading` when its model is
   * loading somewhere (`loading`), else `queued`; one that streams gets its key and account. Rows that
   * only a gateway knew of and that it no longer lists are gone (ended, or retried under a new run id).
   */
  pending(runs: readonly PendingRun[], loading: ReadonlySet<string>, now: number): void {
    const listed = new Set<string>();
    for (const run of runs) {
      listed.add(run.runId);
      const keyId = run.keyId ?? null;
      const account = run.account ?? null;
      let row = this.rows.get(run.runId);
      if (!row) {
        if (this.rows.size >= MAX_LIVE_ROWS) continue;
        row = {
          runId: run.runId,
          model: run.model,
          workerId: null,
          state: 'queued',
          tool: null,
          keyId,
          account,
          streamed: false,
          promptTokens: 0,
          tokens: 0,
          startedAt: run.since,
          firstTokenAt: null,
          lastEventAt: now,
        };
        this.rows.set(run.runId, row);
        this.dirty = true;
      }
      if (row.keyId !== keyId || row.account !== account) {
        row.keyId = keyId;
        row.account = account;
        this.dirty = true;
      }
      if (row.streamed && run.tool === undefined) continue;
      row.lastEventAt = now;
      const tool = run.tool ?? null;
      const state: LiveState =
        tool !== null ? 'tool' : run.workerId === null && loading.has(run.model) ? 'loading' : 'queued';
      if (row.state !== state || row.workerId !== run.workerId || row.tool !== tool) {
        row.state = state;
        row.workerId = run.workerId;
        row.tool = tool;
        this.dirty = true;
      }
    }
    for (const [runId, row] of this.rows) {
      if (!row.streamed && !listed.has(runId)) {
        this.rows.delete(runId);
        this.dirty = true;
      }
    }
  }

  /** Drops rows whose stream went silent for `idleMs` (a worker that died without a last event). */
  sweep(now: number, idleMs: number): void {
    for (const [runId, row] of this.rows) {
      if (now - row.lastEventAt > idleMs) {
        this.rows.delete(runId);
        this.dirty = true;
      }
    }
  }

  get size(): number {
    return this.rows.size;
  }

  /** The rows if anything changed since the last call, else null. */
  take(now: number): LiveView[] | null {
    if (!this.dirty) return null;
    this.dirty = false;
    return this.view(now);
  }

  view(now: number): LiveView[] {
    return [...this.rows.values()].map((row) => {
      const decoding = row.firstTokenAt === null ? 0 : now - row.firstTokenAt;
      return {
        ...row,
        elapsedMs: now - row.startedAt,
        tokensPerSecond: row.firstTokenAt === null ? null : decoding > 0 ? (row.tokens - 1) / (decoding / 1000) : null,
      };
    });
  }
}

/** A load in progress on one worker, with an estimate of the time left. */
export interface LoadView {
  workerId: string;
  model: string;
  fraction: number;
  /** Downloading the file, or reading it into memory; each has its own fraction and estimate. */
  phase: 'downloading' | 'loading';
  /** What started the load, when the worker was told. */
  trigger: LoadTrigger | null;
  /** When the load began (its first word), and when this phase did. */
  startedAt: number;
  phaseStartedAt: number;
  /** The fraction first heard in this phase: the rate is measured from there. */
  phaseStartFraction: number;
  updatedAt: number;
  /** Straight-line estimate of this phase's time left from its progress so far; null before any progress. */
  etaMs: number | null;
}

/** Loads in progress, from `model.progressed`; a loaded, failed or unloaded event ends one. */
export class LoadBoard {
  private readonly loads = new Map<string, LoadView>();

  apply(progress: LoadProgress, now: number): LoadView {
    const key = `${progress.workerId}/${progress.model}`;
    const known = this.loads.get(key);
    const phase = progress.phase ?? 'loading';
    const startedAt = known?.startedAt ?? now;
    // A download's end is not the load's: the estimate starts again with each phase.
    const same = known !== undefined && known.phase === phase;
    const phaseStartedAt = same ? known.phaseStartedAt : now;
    const phaseStartFraction = same ? known.phaseStartFraction : progress.fraction;
    const elapsed = now - phaseStartedAt;
    const done = progress.fraction - phaseStartFraction;
    const view: LoadView = {
      workerId: progress.workerId,
      model: progress.model,
      fraction: progress.fraction,
      phase,
      trigger: progress.trigger ?? known?.trigger ?? null,
      startedAt,
      phaseStartedAt,
      phaseStartFraction,
      updatedAt: now,
      etaMs:
        progress.fraction >= 1
          ? 0
          : done > 0 && elapsed > 0
            ? Math.round((elapsed * (1 - progress.fraction)) / done)
            : null,
    };
    if (this.loads.size < MAX_LIVE_ROWS || known) this.loads.set(key, view);
    return view;
  }

  end(workerId: string, model: string): boolean {
    return this.loads.delete(`${workerId}/${model}`);
  }

  /** Drops loads with no news for `idleMs` (their worker died, or the end event was missed). */
  sweep(now: number, idleMs: number): boolean {
    let dropped = false;
    for (const [key, load] of this.loads) {
      if (now - load.updatedAt > idleMs) dropped = this.loads.delete(key) || dropped;
    }
    return dropped;
  }

  view(): LoadView[] {
    return [...this.loads.values()];
  }
}

/** One feed event as kept for replay: its sequence number, SSE event name and encoded data. */
export interface FeedEvent {
  seq: number;
  event: string;
  data: string;
}

/** The last `capacity` events, so a page that reconnects can be sent what it missed. */
export class EventRing {
  private readonly events: FeedEvent[] = [];
  private next = 1;

  constructor(private readonly capacity: number) {}

  push(event: string, data: string): FeedEvent {
    const entry = { seq: this.next++, event, data };
    this.events.push(entry);
    if (this.events.length > this.capacity) this.events.shift();
    return entry;
  }

  /** The sequence number the next event gets. */
  get nextSeq(): number {
    return this.next;
  }

  /** The oldest sequence number still held (nextSeq when empty). */
  get oldestSeq(): number {
    return this.events[0]?.seq ?? this.next;
  }

  after(seq: number): FeedEvent[] {
    return this.events.filter((e) => e.seq > seq);
  }
}

export type Resume = { kind: 'replay'; after: number } | { kind: 'snapshot'; why: string };

/**
 * What a connecting page gets: the events after its `Last-Event-ID` when this feed (`epoch`) still
 * holds every one of them, else a fresh snapshot. Ids are `<epoch>.<seq>`; a feed that stopped (nobody
 * watched) and started again has another epoch, so an id from before can never replay wrong events.
 */
export function decideResume(
  lastEventId: string | undefined,
  epoch: string,
  oldestSeq: number,
  nextSeq: number,
): Resume {
  if (!lastEventId) return { kind: 'snapshot', why: 'first connection' };
  const match = /^([A-Za-z0-9]+)\.(\d+)$/.exec(lastEventId);
  if (!match) return { kind: 'snapshot', why: 'unreadable Last-Event-ID' };
  if (match[1] !== epoch) return { kind: 'snapshot', why: 'the feed restarted' };
  const seq = Number(match[2]);
  if (seq >= nextSeq) return { kind: 'snapshot', why: 'Last-Event-ID is ahead of the feed' };
  if (seq + 1 < oldestSeq) return { kind: 'snapshot', why: 'missed events are no longer held' };
  return { kind: 'replay', after: seq };
}

/**
 * Whether a page's connection is too far behind to keep: the socket holds more unsent bytes than
 * `limitBytes`. Such a page is disconnected; its browser reconnects with `Last-Event-ID` and is
 * replayed or resynced, so the gateway never buffers without bound for it.
 */
export function tooFarBehind(bufferedBytes: number, limitBytes: number): boolean {
  return bufferedBytes > limitBytes;
}
