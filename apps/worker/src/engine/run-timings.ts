import type { Timings } from '@cortex/contracts';

/**
 * A finished run's timings, every engine alike (performance.now() instants): a run without a first
 * token (cancelled during its prompt) counts its prompt time until `endedAt`.
 */
export function runTimings(at: {
  receivedAt: number;
  /** It left the queue. */
  startedAt: number;
  /** Its prompt began evaluating; `startedAt` when the engine has no step between the two. */
  promptFrom?: number;
  /** 0: no token came. */
  firstTokenAt: number;
  endedAt: number;
  completionTokens: number;
}): Timings {
  const { receivedAt, startedAt, firstTokenAt, endedAt, completionTokens, promptFrom = startedAt } = at;
  const decodeSeconds = firstTokenAt ? (endedAt - firstTokenAt) / 1000 : 0;
  return {
    ttftMs: firstTokenAt ? firstTokenAt - receivedAt : 0,
    promptMs: (firstTokenAt || endedAt) - promptFrom,
    decodeTokensPerSecond: decodeSeconds > 0 && completionTokens > 1 ? (completionTokens - 1) / decodeSeconds : 0,
    durationMs: endedAt - receivedAt,
    queueMs: startedAt - receivedAt,
  };
}
