/**
 * The ids this gateway holds in each KV entry (concurrency leases, budget reservations), renewed
 * every so often while they run, so the entries of a gateway that dies stop counting once they expire.
 */
export class HeldIds implements Iterable<[string, ReadonlySet<string>]> {
  private readonly byEntry = new Map<string, Set<string>>();
  private timer: NodeJS.Timeout | null = null;

  /** `renew` extends the ids of one entry; it reports its own failures (the next round tries again). */
  constructor(private readonly renew: (entry: string, ids: string[]) => Promise<unknown> = () => Promise.resolve()) {}

  add(entry: string, id: string): void {
    const ids = this.byEntry.get(entry) ?? new Set<string>();
    ids.add(id);
    this.byEntry.set(entry, ids);
  }

  delete(entry: string, id: string): void {
    const ids = this.byEntry.get(entry);
    ids?.delete(id);
    if (ids?.size === 0) this.byEntry.delete(entry);
  }

  /** Renews every entry's ids once, one entry after another. */
  async renewAll(): Promise<void> {
    for (const [entry, ids] of this.byEntry) await this.renew(entry, [...ids]);
  }

  /** Renews every `everyMs` until `stop`; the timer does not keep the process alive. */
  start(everyMs: number): void {
    this.stop();
    this.timer = setInterval(() => void this.renewAll(), everyMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  [Symbol.iterator](): Iterator<[string, ReadonlySet<string>]> {
    return this.byEntry[Symbol.iterator]();
  }
}
