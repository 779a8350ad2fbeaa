/**
 * The ids this gateway holds in each KV entry (concurrency leases, budget reservations): what it
 * renews while they run, so the entries of a gateway that dies stop counting once they expire.
 */
export class HeldIds implements Iterable<[string, ReadonlySet<string>]> {
  private readonly byEntry = new Map<string, Set<string>>();

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

  [Symbol.iterator](): Iterator<[string, ReadonlySet<string>]> {
    return this.byEntry[Symbol.iterator]();
  }
}
