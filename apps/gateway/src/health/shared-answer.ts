/**
 * One answer shared by every caller for `maxAgeMs`, and at most one computation in flight: an
 * unauthenticated endpoint whose answer costs bus requests (`GET /health`) must not let a client
 * multiply that cost by calling it in a loop.
 */
export class SharedAnswer<T> {
  private pending: Promise<T> | null = null;
  private last: { value: T; at: number } | null = null;

  constructor(
    private readonly compute: () => Promise<T>,
    private readonly maxAgeMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  get(): Promise<T> {
    if (this.last && this.now() - this.last.at < this.maxAgeMs) return Promise.resolve(this.last.value);
    this.pending ??= this.compute()
      .then((value) => {
        this.last = { value, at: this.now() };
        return value;
      })
      .finally(() => {
        this.pending = null;
      });
    return this.pending;
  }
}
