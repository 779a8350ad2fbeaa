/**
 * Turns decoded text pieces into safe-to-send deltas: text that could still be the start of a stop
 * string is held back until it can no longer match, and a stop string is never sent, even in part.
 */
export class TextStreamer {
  private held = '';
  private readonly longest: number;

  constructor(private readonly stops: readonly string[]) {
    this.longest = stops.reduce((max, stop) => Math.max(max, stop.length), 0);
  }

  /** False when there is nothing to watch for: pieces may be sent as they are. */
  get holding(): boolean {
    return this.longest > 0;
  }

  /** The characters held back now. */
  get heldLength(): number {
    return this.held.length;
  }

  /** Feeds a piece; returns what may be sent now, and whether a stop string was hit. */
  push(piece: string): { text: string; stopped: boolean; stop?: string } {
    if (this.longest === 0) return { text: piece, stopped: false };
    this.held += piece;
    let cut = -1;
    let matched: string | undefined;
    for (const stop of this.stops) {
      const at = this.held.indexOf(stop);
      if (at !== -1 && (cut === -1 || at < cut)) {
        cut = at;
        matched = stop;
      }
    }
    if (cut !== -1) {
      const text = this.held.slice(0, cut);
      this.held = '';
      return { text, stopped: true, stop: matched };
    }
    const keep = this.partialMatchLength();
    const text = this.held.slice(0, this.held.length - keep);
    this.held = this.held.slice(this.held.length - keep);
    return { text, stopped: false };
  }

  /** Whatever is still held when generation ends for another reason. */
  flush(): string {
    const text = this.held;
    this.held = '';
    return text;
  }

  /** Length of the longest suffix of `held` that is a proper prefix of some stop string. */
  private partialMatchLength(): number {
    const max = Math.min(this.held.length, this.longest - 1);
    for (let length = max; length > 0; length--) {
      const suffix = this.held.slice(this.held.length - length);
      if (this.stops.some((stop) => stop.startsWith(suffix))) return length;
    }
    return 0;
  }
}
