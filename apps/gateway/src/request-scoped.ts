/**
 * A value per request id, kept for the life of the request in this gateway's memory: set when the
 * request is admitted, read by whatever runs it, and forgotten some time after it ends (a later read
 * — a background run's usage — may still need it). A request id given a newer value keeps it when
 * the older one's `forget` comes due.
 */
export class RequestScoped<T> {
  private readonly entries = new Map<string, T>();

  set(requestId: string, value: T): { forget: (afterMs: number) => void } {
    this.entries.set(requestId, value);
    return {
      forget: (afterMs) => {
        setTimeout(() => {
          if (this.entries.get(requestId) === value) this.entries.delete(requestId);
        }, afterMs).unref();
      },
    };
  }

  get(requestId: string): T | undefined {
    return this.entries.get(requestId);
  }

  get size(): number {
    return this.entries.size;
  }
}
