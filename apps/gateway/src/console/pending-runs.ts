import type { PendingRun, UsageOwner } from '@cortex/contracts';

/** At most this many requests are tracked: a flood cannot grow the gateway's memory without bound. */
const MAX_PENDING = 10_000;

/**
 * The requests this gateway is running, from placement to their end: the model, the worker once
 * placed, and when they began. The console asks every gateway for them, to show requests that wait
 * (for a router's answer, a load, or a worker's slot) before their token stream says anything, and
 * whose key a request is. One map entry per request: nothing else runs until a page asks.
 */
export class PendingRuns {
  /** By the run that placed it (one row per choice of a request with several). */
  private readonly runs = new Map<unknown, PendingRun>();

  /** A placement starts (again, on a retry: the run id changes, the request stays one row); `payer` is the stored key that pays for it. */
  placing(
    owner: unknown,
    requestId: string,
    runId: string,
    model: string,
    now: number,
    payer: UsageOwner | null = null,
  ): void {
    const known = this.runs.get(owner);
    if (known) {
      known.runId = runId;
      known.workerId = null;
      return;
    }
    if (this.runs.size >= MAX_PENDING) return;
    this.runs.set(owner, row(requestId, runId, model, now, payer));
  }

  /**
   * A request waits on an MCP tool between its model turns (`owner` is its loop): shown under the run
   * id of the turn that called it, until `done`.
   */
  toolCall(
    owner: unknown,
    requestId: string,
    runId: string,
    model: string,
    tool: string,
    now: number,
    payer: UsageOwner | null,
  ): void {
    if (!this.runs.has(owner) && this.runs.size >= MAX_PENDING) return;
    this.runs.set(owner, { ...row(requestId, runId, model, now, payer), tool });
  }

  placed(owner: unknown, workerId: string): void {
    const run = this.runs.get(owner);
    if (run) run.workerId = workerId;
  }

  done(owner: unknown): void {
    this.runs.delete(owner);
  }

  /** Drops requests older than `maxAgeMs` (one that ended without a word, e.g. its client vanished mid-placement). */
  sweep(now: number, maxAgeMs: number): void {
    for (const [id, run] of this.runs) if (now - run.since > maxAgeMs) this.runs.delete(id);
  }

  get size(): number {
    return this.runs.size;
  }

  list(): PendingRun[] {
    return [...this.runs.values()].map((run) => ({ ...run }));
  }
}

/** A request's row, not placed yet. */
function row(requestId: string, runId: string, model: string, now: number, payer: UsageOwner | null): PendingRun {
  return {
    requestId,
    runId,
    model,
    workerId: null,
    since: now,
    ...(payer && { keyId: payer.keyId, account: payer.account }),
  };
}
