import type { Usage, UsageOwner } from '@cortex/contracts';

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
  private done: ((tokens: number) => void) | null = null;
  /** The tokens every run of the request used, once the request closed and all of them reported. */
  readonly settled: Promise<number>;

  constructor() {
    this.settled = new Promise((resolve) => (this.done = resolve));
  }

  /** The stored key and account that pay for the request (its admission says so, before any run ends). */
  bill(owner: UsageOwner): void {
    this.owner = owner;
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
