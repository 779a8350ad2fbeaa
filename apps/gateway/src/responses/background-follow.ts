import { CortexError, type ErrorBody, type StreamEvent } from '@cortex/contracts';
import { toCortexError } from '../http/error-response.js';
import type { InferenceRun } from '../inference/inference-run.js';

/** What following a background run needs of it. */
export type FollowedRun = Pick<InferenceRun, 'subject' | 'requestId' | 'listen' | 'fail' | 'detach' | 'cancel'>;

/** Publishes one event body on a subject (the bus client's publish, bound). */
export type PublishEvent = (
  subject: string,
  event:
    { type: 'keepalive'; seq: number; moving: true } | { type: 'error'; error: ErrorBody; seq: number; moving: true },
  requestId: string,
) => void;

/**
 * The placing gateway's side of a started background run. It reads the run's events to their end, so
 * the request-finished event carries the finish and usage (the run does not depend on it: a gateway that
 * dies just stops counting). When the run's worker is lost the run moves to another worker like any
 * stream (RunStream.migrate); during the move this publishes keep-alives on the lost run's subject,
 * so whoever reads the response's stored events (a client following it with `stream=true`, a translator
 * asked for it) sees a run that lives on, not one that fell silent. They are marked `moving`, the first
 * at once: the next run goes on from what this gateway read before it, so whatever the lost worker still
 * sends after it (a frozen worker that wakes) is left out of the response. A move that fails, or that a cancel
 * stops, ends the response with its error: nothing else would.
 */
export class BackgroundFollow {
  /** The subject of the run whose events were read last: the one the response's readers hold until the next run's start. */
  private lastSubject: string;
  private keepAlive: NodeJS.Timeout | undefined;
  private moving = false;
  private cancelled = false;

  constructor(
    private readonly run: FollowedRun,
    private readonly publish: PublishEvent,
    private readonly keepAliveMs: number,
  ) {
    this.lastSubject = started(run);
    run.listen((notice) => {
      if (notice.type === 'moving') this.startMove();
      else if (notice.type === 'resumed') this.endMove();
    });
  }

  /** Whether the run is between a lost worker and the next one's start. */
  get isMoving(): boolean {
    return this.moving;
  }

  /** Reads `events` (the started run's) to their end. */
  async follow(events: AsyncIterable<StreamEvent>): Promise<void> {
    try {
      for await (const event of events) {
        this.lastSubject = started(this.run);
        if (event.type === 'error') this.run.fail(CortexError.fromBody(event.error), true);
      }
    } catch (thrown) {
      if (this.moving)
        this.endWith(
          this.cancelled
            ? new CortexError('cancelled', 'cancelled by POST /v1/responses/{id}/cancel')
            : toCortexError(thrown),
        );
      // Otherwise the read failed without a move (this gateway lost the bus, a stream that may not move): the worker may run on.
      this.run.detach();
    } finally {
      this.endMove();
    }
  }

  /**
   * `POST …/cancel` while the run moves: no worker holds it to hear the cancel, so the move itself stops.
   * Returns false when the run is not moving (its worker is the one to cancel).
   */
  cancelMove(reason: string): boolean {
    if (!this.moving) return false;
    this.cancelled = true;
    this.run.cancel(reason);
    return true;
  }

  private startMove(): void {
    this.moving = true;
    clearInterval(this.keepAlive);
    const lost = this.lastSubject;
    const keepAlive = (): void => this.publish(lost, { type: 'keepalive', seq: 0, moving: true }, this.run.requestId);
    keepAlive();
    this.keepAlive = setInterval(keepAlive, this.keepAliveMs);
  }

  private endMove(): void {
    this.moving = false;
    clearInterval(this.keepAlive);
    this.keepAlive = undefined;
  }

  /**
   * Ends the response with `error`. Published on the lost run's subject (its readers hold it) and on the
   * last try's (its start may have been stored before it failed): a reader applies the one of its run.
   */
  private endWith(error: CortexError): void {
    // Marked like the keep-alives: the one error of a marked run that ends the response (see BackgroundReplay).
    const event = { type: 'error' as const, error: error.toBody(), seq: 0, moving: true as const };
    for (const subject of new Set([this.lastSubject, started(this.run)]))
      this.publish(subject, event, this.run.requestId);
  }
}

/** The subject of a run that has started (its events are read). */
function started(run: FollowedRun): string {
  if (run.subject === null) throw new Error('a background run is followed only once it started');
  return run.subject;
}
