import type { LoadProgress } from '@cortex/contracts';

/** What a run tells those watching it (the responder, a background follow), besides its events. */
export type RunNotice =
  /** A step of the cold load the request waits for. */
  | { type: 'loading'; progress: LoadProgress }
  /** The stream's worker was lost and the stream is being placed again (a background run keeps its readers waiting). */
  | { type: 'moving' }
  /** The stream went on on `workerId` (a Chat Completions stream writes it as an SSE comment). */
  | { type: 'resumed'; workerId: string };

export type RunListener = (notice: RunNotice) => void;

/**
 * A run's one channel for its observers: each listens for as long as it wants (the returned function
 * stops it), and all of them hear every notice, in the order they began to listen. A listener that
 * throws is the run's bug to see, not a reason for the others to miss the notice.
 */
export class RunNotices {
  private readonly listeners = new Set<RunListener>();

  listen(listener: RunListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Whether anyone listens: a load's progress is only subscribed to for a listener. */
  get heard(): boolean {
    return this.listeners.size > 0;
  }

  emit(notice: RunNotice): void {
    let failure: unknown = null;
    for (const listener of this.listeners) {
      try {
        listener(notice);
      } catch (error) {
        failure ??= error;
      }
    }
    if (failure !== null) throw failure;
  }
}
