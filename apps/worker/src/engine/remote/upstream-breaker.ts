import type { UnreachableUpstream } from '@cortex/contracts';

/** Server errors in a row after which an upstream is given a rest. */
export const SERVER_ERRORS_IN_A_ROW = 3;
/** How long an upstream that keeps answering 5xx is not asked (then one request tries it again). */
export const REST_MS = 10_000;

/**
 * Whether an upstream that answers, but with server errors, is asked at all: after
 * SERVER_ERRORS_IN_A_ROW 5xx answers in a row it rests for REST_MS — its requests go to the next
 * place at once, without reaching it — and then one request tries it again: an answer that is not a
 * 5xx ends the rest, another 5xx starts the next one. While it fails it counts as not answering
 * (`failing`: the heartbeat says so, placement tries it last, /health is impaired). A circuit breaker
 * with a half-open try, as LiteLLM's cooldowns and Envoy's outlier ejection do. Pure: the caller
 * gives the time.
 */
export class UpstreamBreaker {
  private inARow = 0;
  private restUntil = 0;
  private since = 0;
  private last = '';

  /** The upstream answered with `status` (`message`: what it said) at `now`. */
  answered(status: number, message: string, now: number): void {
    if (status < 500) {
      this.inARow = 0;
      this.restUntil = 0;
      return;
    }
    this.inARow++;
    const said = message.length > 200 ? `${message.slice(0, 200)}…` : message;
    this.last = `answers HTTP ${status}${said ? `: ${said}` : ''}`;
    if (this.inARow < SERVER_ERRORS_IN_A_ROW) return;
    if (this.restUntil === 0) this.since = now;
    this.restUntil = now + REST_MS;
  }

  /** Why a request at `now` does not go to the upstream, and in how many ms it may; null when it may go now. */
  resting(now: number): { why: string; forMs: number } | null {
    if (now >= this.restUntil) return null;
    return {
      why: `${this.last} (${this.inARow} in a row), so it is not asked for ${Math.ceil((this.restUntil - now) / 1000)} s`,
      forMs: this.restUntil - now,
    };
  }

  /** While the upstream keeps failing (resting, or on its try after a rest): since when, and its last answer. */
  get failing(): UnreachableUpstream | null {
    return this.restUntil === 0 ? null : { since: this.since, error: `${this.last} (${this.inARow} in a row)` };
  }
}
