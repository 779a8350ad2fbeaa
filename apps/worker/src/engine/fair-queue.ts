import type { RequestPriority, Usage } from '@cortex/contracts';

/**
 * Where a waiting request stands in its model's queue: its tier, the account it is fair among, and the tokens it is
 * charged on admission.
 */
export interface QueueTicket {
  /** Higher is served first: 1 to 9 for keys, 0 for requests without one. */
  tier: number;
  /** The account the request is charged to (fairness is between accounts); '' for requests without one. */
  flow: string;
  /** Tokens charged to the flow when it is admitted (an estimate; `settle` corrects it to the real cost). */
  cost: number;
}

/** A request made without a tier or account: the lowest tier, one shared flow, charged nothing up front. */
export const UNRANKED: Readonly<QueueTicket> = Object.freeze({ tier: 0, flow: '', cost: 0 });

/**
 * What a finished request really cost its account: the prompt tokens it had to evaluate (not those reused from the
 * sequence) plus its output.
 */
export function chargedTokens(usage: Pick<Usage, 'promptTokens' | 'cachedPromptTokens' | 'completionTokens'>): number {
  return Math.max(0, usage.promptTokens - usage.cachedPromptTokens) + usage.completionTokens;
}

/** A generate request's ticket: its tier and account from the command, charged `estimate` tokens on admission. */
export function ticketOf(priority: RequestPriority | undefined, estimate: number): QueueTicket {
  return { tier: priority?.tier ?? UNRANKED.tier, flow: priority?.account ?? UNRANKED.flow, cost: estimate };
}

/** The order in which a model's waiting requests get a free sequence. */
export interface WaitQueue<W> {
  readonly size: number;
  push(waiter: W, ticket: QueueTicket): void;
  /** Takes out a waiter that gave up (aborted); false when it was not queued. */
  remove(waiter: W): boolean;
  /** The waiter to admit next (charging its flow), or undefined when none waits. */
  shift(): W | undefined;
  /** A request was admitted at once, without waiting: its flow is charged all the same. */
  admitted(ticket: QueueTicket): void;
  /** An admitted request ended having cost `cost` tokens: its flow's charge is corrected from the estimate. */
  settle(ticket: QueueTicket, cost: number): void;
}

/** First come, first served: the order before fair queueing, kept as `worker.queue_order: fifo`. */
export class FifoQueue<W> implements WaitQueue<W> {
  private readonly waiters: W[] = [];

  get size(): number {
    return this.waiters.length;
  }

  push(waiter: W): void {
    this.waiters.push(waiter);
  }

  remove(waiter: W): boolean {
    const at = this.waiters.indexOf(waiter);
    if (at === -1) return false;
    this.waiters.splice(at, 1);
    return true;
  }

  shift(): W | undefined {
    return this.waiters.shift();
  }

  admitted(): void {}

  settle(): void {}
}

interface Flow<W> {
  name: string;
  waiting: { waiter: W; ticket: QueueTicket }[];
  /** Tokens the flow may still be admitted for in this round; negative while it owes for what it ran. */
  deficit: number;
  /** Admitted requests not yet settled: the flow (and what it owes) is kept while any runs. */
  running: number;
  /** The band's round when the flow last stopped waiting: the rounds since pay down its debt when it waits again. */
  idleSince: number | null;
}

/** One tier's flows, served by deficit round robin. */
class Band<W> {
  readonly flows = new Map<string, Flow<W>>();
  /** Flows with waiters, in round-robin order. */
  readonly active: Flow<W>[] = [];
  cursor = 0;
  /** The flow at the cursor has had its quantum for this visit. */
  visited = false;
  /** Rounds completed (the cursor wrapped, or skipRounds skipped them). */
  rounds = 0;
}

/**
 * Strict priority between tiers, and within a tier deficit round robin (Shreedhar and Varghese)
 * between accounts, charged in tokens. Each visit of the round gives a flow `quantum` tokens of
 * credit; it is admitted while its credit covers its next request's estimate. A request is charged
 * its estimate when admitted, waiting or not, and corrected to its real cost (uncached prompt plus
 * output) when it ends, so an account running long generations owes for them before it is admitted
 * again. A flow keeps its debt while any of its requests runs, paid down by a quantum for every round
 * it sat out with nothing waiting (as the waiting flows were given theirs), but never into credit: a
 * flow with nothing waiting keeps no positive balance, so an account that was idle cannot burst past
 * the others, and one below its share is not made to wait for quanta the others collected meanwhile.
 * Within one flow, first come first served. Pure: no clock, no I/O.
 */
export class FairQueue<W> implements WaitQueue<W> {
  /** Bands by tier; looked up from the highest tier down. */
  private readonly bands = new Map<number, Band<W>>();
  private count = 0;

  /**
   * `quantum`: tokens of credit per visit. Smaller interleaves accounts request by request; a round
   * that admits nobody is skipped in one step, so a small quantum costs no more work.
   */
  constructor(private readonly quantum = 64) {
    if (!(quantum > 0)) throw new Error(`the fair queue's quantum must be positive (got ${quantum})`);
  }

  get size(): number {
    return this.count;
  }

  push(waiter: W, ticket: QueueTicket): void {
    const band = this.band(ticket.tier);
    const flow = this.flow(band, ticket.flow);
    flow.waiting.push({ waiter, ticket });
    // A flow joins the round at its end, as in DRR: it waits for the flows already waiting to have their turn.
    if (flow.waiting.length === 1) {
      // Its debt was paid down by a quantum for each round it sat out, as the waiting flows were given
      // theirs; never into credit. Without this an account that always has a request running (and so
      // always owes for one) would wait for its quanta while the others collected theirs in the meantime.
      if (flow.idleSince !== null)
        flow.deficit = Math.min(0, flow.deficit + (band.rounds - flow.idleSince) * this.quantum);
      flow.idleSince = null;
      band.active.push(flow);
    }
    this.count++;
  }

  remove(waiter: W): boolean {
    for (const band of this.bands.values()) {
      for (const flow of band.active) {
        const at = flow.waiting.findIndex((entry) => entry.waiter === waiter);
        if (at === -1) continue;
        flow.waiting.splice(at, 1);
        this.count--;
        if (flow.waiting.length === 0) this.idle(band, flow);
        return true;
      }
    }
    return false;
  }

  shift(): W | undefined {
    if (this.count === 0) return undefined;
    const tier = Math.max(...[...this.bands].filter(([, band]) => band.active.length > 0).map(([tier]) => tier));
    const band = this.bands.get(tier) as Band<W>;
    // Visits since the last admission: a whole round of them admitted nobody and is skipped (see skipRounds).
    let visits = 0;
    for (;;) {
      const flow = band.active[band.cursor] as Flow<W>;
      if (!band.visited) {
        flow.deficit += this.quantum;
        band.visited = true;
      }
      const head = flow.waiting[0] as { waiter: W; ticket: QueueTicket };
      if (head.ticket.cost <= flow.deficit) {
        flow.waiting.shift();
        flow.deficit -= head.ticket.cost;
        flow.running++;
        this.count--;
        if (flow.waiting.length === 0) this.idle(band, flow);
        return head.waiter;
      }
      band.cursor = (band.cursor + 1) % band.active.length;
      band.visited = false;
      if (band.cursor === 0) band.rounds++;
      if (++visits === band.active.length) {
        this.skipRounds(band);
        visits = 0;
      }
    }
  }

  admitted(ticket: QueueTicket): void {
    const band = this.band(ticket.tier);
    const flow = this.flow(band, ticket.flow);
    flow.deficit -= ticket.cost;
    flow.running++;
    if (flow.waiting.length === 0) flow.idleSince ??= band.rounds;
  }

  settle(ticket: QueueTicket, cost: number): void {
    const band = this.bands.get(ticket.tier);
    const flow = band?.flows.get(ticket.flow);
    if (!band || !flow) return;
    flow.deficit += ticket.cost - cost;
    flow.running = Math.max(0, flow.running - 1);
    this.forgetIfDone(band, flow);
  }

  /** What the queue holds, for tests and logs: per tier (highest first), each flow's waiters and balance. */
  describe(): { tier: number; flow: string; waiting: number; deficit: number; running: number }[] {
    return [...this.bands]
      .sort(([a], [b]) => b - a)
      .flatMap(([tier, band]) =>
        [...band.flows.values()].map((flow) => ({
          tier,
          flow: flow.name,
          waiting: flow.waiting.length,
          deficit: flow.deficit,
          running: flow.running,
        })),
      );
  }

  /**
   * Every flow of the round had its quantum and none could be admitted: add the rounds it would take
   * until one can, minus the one the next visits give. The same order as visiting them one by one,
   * without looping a request's cost divided by the quantum times.
   */
  private skipRounds(band: Band<W>): void {
    const rounds = Math.min(
      ...band.active.map((flow) => Math.ceil(((flow.waiting[0]?.ticket.cost ?? 0) - flow.deficit) / this.quantum)),
    );
    if (rounds > 1) {
      for (const flow of band.active) flow.deficit += (rounds - 1) * this.quantum;
      band.rounds += rounds - 1;
    }
  }

  /** The flow has nothing waiting: out of the round, its unused credit dropped (its debt kept while it runs). */
  private idle(band: Band<W>, flow: Flow<W>): void {
    const at = band.active.indexOf(flow);
    band.active.splice(at, 1);
    if (at < band.cursor) band.cursor--;
    else if (at === band.cursor) band.visited = false;
    if (band.cursor >= band.active.length && band.active.length > 0) {
      band.cursor = 0;
      band.rounds++;
    }
    flow.deficit = Math.min(flow.deficit, 0);
    flow.idleSince = band.rounds;
    this.forgetIfDone(band, flow);
  }

  private forgetIfDone(band: Band<W>, flow: Flow<W>): void {
    if (flow.waiting.length === 0 && flow.running === 0) band.flows.delete(flow.name);
  }

  private band(tier: number): Band<W> {
    let band = this.bands.get(tier);
    if (!band) this.bands.set(tier, (band = new Band<W>()));
    return band;
  }

  private flow(band: Band<W>, name: string): Flow<W> {
    let flow = band.flows.get(name);
    if (!flow) band.flows.set(name, (flow = { name, waiting: [], deficit: 0, running: 0, idleSince: null }));
    return flow;
  }
}
