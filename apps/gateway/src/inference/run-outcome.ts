import {
  NO_USAGE,
  type CortexError,
  type ErrorCode,
  type FinishReason,
  type StreamEvent,
  type Timings,
  type Usage,
} from '@cortex/contracts';

/** What a run's request-finished event says of how it ended. */
export interface OutcomeFields {
  status: number;
  errorCode: ErrorCode | null;
  finishReason: FinishReason | null;
  usage: Usage | null;
  timings: Timings | null;
}

/**
 * How one run ended and what it used: its HTTP status, error and finish reason, the worker's usage and
 * timings, and the output tokens its client was handed. Reported once to the request's meter (see
 * RequestMeter) when the run settles; a run stopped before its stream ended settles once its worker's
 * last event came, or without it (see InferenceRun.finish).
 */
export class RunOutcome {
  private status = 200;
  private errorCode: ErrorCode | null = null;
  private finishReason: FinishReason | null = null;
  private usage: Usage | null = null;
  private timings: Timings | null = null;
  /** Output tokens handed on to the client (the ids its events carried), for a run whose worker never says what it used. */
  private delivered = 0;
  /** The worker's last event, awaited after the gateway stopped reading a stream that had not ended. */
  private last: Promise<StreamEvent | null> | null = null;

  /** `report` tells the request's meter what the run used (none: nobody pays for it). */
  constructor(private readonly report: ((usage: Usage | null) => void) | null) {}

  /** An event handed on to the client: its tokens count as delivered, a finish says what the run used. */
  observe(event: StreamEvent): void {
    if ('tokens' in event && event.tokens) this.delivered += event.tokens.length;
    if (event.type === 'finish') {
      this.finishReason = event.reason;
      this.usage = event.usage;
      this.timings = event.timings;
    }
  }

  /** A request answered without a stream (embeddings, rerank). */
  answered(promptTokens: number): void {
    this.usage = { ...NO_USAGE, promptTokens };
    this.finishReason = 'stop';
  }

  /** The client went away before the run ended. */
  cancelled(): void {
    this.finishReason = 'cancelled';
  }

  /** A failure; the HTTP status changes only if the response had not started. */
  fail(error: CortexError, responseStarted: boolean): void {
    if (!responseStarted) this.status = error.status;
    this.errorCode = error.code;
    this.finishReason ??= 'error';
  }

  get failedWith(): ErrorCode | null {
    return this.errorCode;
  }

  /** The worker's last event of a stream the gateway stopped reading before its end (see whenSettled). */
  awaitLast(last: Promise<StreamEvent | null>): void {
    this.last = last;
  }

  /**
   * Calls `settled` once what the run used is known: at once for a stream that ended, else once its
   * worker's last event came (a cancelled run's finish carries the worker's own count) or did not come
   * in time, when the run is charged its prompt (`promptTokens`) and the output its client was given.
   */
  whenSettled(promptTokens: () => number, settled: () => void): void {
    const last = this.last;
    if (!last) return settled();
    void last.then((event) => {
      if (event?.type === 'finish') this.usage = event.usage;
      else {
        const prompt = promptTokens();
        if (prompt + this.delivered > 0)
          this.usage = { ...NO_USAGE, promptTokens: prompt, completionTokens: this.delivered };
      }
      settled();
    });
  }

  /** Tells the request's meter what the run used; once. */
  reported(): void {
    this.report?.(this.usage);
  }

  get fields(): OutcomeFields {
    const { status, errorCode, finishReason, usage, timings } = this;
    return { status, errorCode, finishReason, usage, timings };
  }
}
