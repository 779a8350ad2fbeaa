import { billionthsOf, type Usage, type UsageOwner, type UsageRecord } from '@cortex/contracts';

/**
 * The meter of the request each payer was billed on. A run hands its payer to the usage recorder with
 * its finish, and the record made there carries the cost; through this map the cost comes back to
 * the request's meter, so a money budget is charged exactly what the usage records say (never a
 * second reckoning of the price).
 */
const meters = new WeakMap<UsageOwner, RequestMeter>();

/**
 * What one request was given, summed over every run it started, and who pays for it. The request owns
 * it: each run it opens reports its usage once, however it ended (finished, failed, cancelled, its
 * client gone, moved to another worker), and `settled` resolves once the request has closed and every
 * run has reported. A run reports within its own bound (see InferenceRun.finish), so nothing here
 * waits on a timer or matches request ids.
 */
export class RequestMeter {
  private open = 0;
  private used = 0;
  private closed = false;
  private owner: UsageOwner | null = null;
  private billionths = 0;
  private done: ((tokens: number) => void) | null = null;
  /** The tokens every run of the request used, once the request closed and all of them reported. */
  readonly settled: Promise<number>;

  constructor() {
    this.settled = new Promise((resolve) => (this.done = resolve));
  }

  /** The stored key and account that pay for the request (its admission says so, before any run ends). */
  bill(owner: UsageOwner): void {
    this.owner = owner;
    meters.set(owner, this);
  }

  /**
   * A usage record of a run billed to `payer` was made: its cost counts toward the meter that payer
   * came from. A run's record is made just before it reports (InferenceRun.record), so a settled
   * meter holds the cost of every record of the request.
   */
  static charge(payer: UsageOwner | null, record: UsageRecord): void {
    if (payer && record.cost !== undefined) meters.get(payer)?.add(billionthsOf(record.cost));
  }

  /** The cost of the request's usage records so far, in billionths of `billing.currency` (0 for models without a price). */
  get cost(): number {
    return this.billionths;
  }

  private add(billionths: number): void {
    this.billionths += billionths;
  }

  /** Who pays; null for a key from the config file, or none. */
  get payer(): UsageOwner | null {
    return this.owner;
  }

  /** The tokens the runs that reported so far used. */
  get reported(): number {
    return this.used;
  }

  /** A run of the request begins: the returned report must be called once, with what the run used. */
  opened(): (usage: Usage | null) => void {
    this.open++;
    let reported = false;
    return (usage) => {
      if (reported) return;
      reported = true;
      this.open--;
      this.used += usage ? usage.promptTokens + usage.completionTokens : 0;
      this.check();
    };
  }

  /** The request's response (or WebSocket turn) closed: no run opens after this. */
  close(): void {
    this.closed = true;
    this.check();
  }

  private check(): void {
    if (!this.closed || this.open > 0 || !this.done) return;
    this.done(this.used);
    this.done = null;
  }
}
