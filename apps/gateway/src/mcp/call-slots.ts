/** Calls that may wait for a slot of one server beyond those running; past it a call is refused at once. */
export const MAX_WAITING_CALLS = 64;

/**
 * The calls one server is running from this gateway: at most `limit` at once, then up to
 * MAX_WAITING_CALLS waiting in order, each until its own signal ends its wait.
 */
export class CallSlots {
  running = 0;
  private readonly waiting: Array<() => void> = [];

  constructor(private readonly limit: number) {}

  get queued(): number {
    return this.waiting.length;
  }

  /** A slot, and the function that gives it back (once); null when the wait is full. Rejects with `signal`'s reason. */
  acquire(signal: AbortSignal): Promise<(() => void) | null> {
    signal.throwIfAborted();
    if (this.running < this.limit) {
      this.running++;
      return Promise.resolve(this.releaser());
    }
    if (this.waiting.length >= MAX_WAITING_CALLS) return Promise.resolve(null);
    return new Promise((resolve, reject) => {
      const grant = (): void => {
        signal.removeEventListener('abort', leave);
        this.running++;
        resolve(this.releaser());
      };
      const leave = (): void => {
        const at = this.waiting.indexOf(grant);
        if (at !== -1) this.waiting.splice(at, 1);
        reject(signal.reason as Error);
      };
      this.waiting.push(grant);
      signal.addEventListener('abort', leave, { once: true });
    });
  }

  private releaser(): () => void {
    let given = false;
    return () => {
      if (given) return;
      given = true;
      this.running--;
      this.waiting.shift()?.();
    };
  }
}
