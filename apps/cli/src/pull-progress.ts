/** Where `cortex pull` writes its progress: a terminal, a pipe, or a script reading JSON lines. */
export interface ProgressOut {
  write(text: string): void;
  readonly isTTY: boolean;
}

const MIB = 2 ** 20;

/**
 * A download's progress as `cortex pull` shows it: one line rewritten in place on a terminal (bytes,
 * speed, time left), a plain line per tenth otherwise, or a JSON object per update with `--json`.
 * Speed is measured over this run's bytes, so a resumed download does not count what it already had.
 */
export class PullProgress {
  private startedAt = 0;
  private startBytes = 0;
  private lastTenth = -1;
  private open = false;

  constructor(
    private readonly out: ProgressOut,
    private readonly json: boolean,
    private readonly now: () => number = Date.now,
  ) {}

  update(source: string, bytes: number, totalBytes: number): void {
    if (this.startedAt === 0) {
      this.startedAt = this.now();
      this.startBytes = bytes;
    }
    const seconds = (this.now() - this.startedAt) / 1000;
    const speed = seconds > 0 ? (bytes - this.startBytes) / seconds : 0;
    const left = speed > 0 && totalBytes > 0 ? Math.max(0, (totalBytes - bytes) / speed) : null;
    if (this.json) {
      const report = {
        source,
        bytes,
        totalBytes,
        bytesPerSecond: Math.round(speed),
        secondsLeft: left === null ? null : Math.round(left),
      };
      this.out.write(`${JSON.stringify(report)}\n`);
      return;
    }
    const line =
      `${source}  ${size(bytes)} of ${size(totalBytes)}  ${percent(bytes, totalBytes)}  ` +
      `${size(speed)}/s  ${left === null ? '--:--' : clock(left)} left`;
    if (this.out.isTTY) {
      this.out.write(`\r\x1b[2K${line}`);
      this.open = true;
      return;
    }
    const tenth = totalBytes > 0 ? Math.floor((bytes / totalBytes) * 10) : 0;
    if (tenth > this.lastTenth) {
      this.lastTenth = tenth;
      this.out.write(`${line}\n`);
    }
  }

  /** Ends the rewritten line and starts the next download afresh. */
  done(): void {
    if (this.open) this.out.write('\n');
    this.open = false;
    this.startedAt = 0;
    this.lastTenth = -1;
  }
}

function size(bytes: number): string {
  return `${(bytes / MIB).toFixed(1)} MiB`;
}

function percent(bytes: number, total: number): string {
  return total > 0 ? `${Math.floor((bytes / total) * 100)}%` : '?%';
}

function clock(seconds: number): string {
  const s = Math.round(seconds);
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}`;
}
