import { BACKGROUND_STREAM, CortexError, mib } from '@cortex/contracts';

/** New background responses are refused once the stream holds this share of its `max_bytes`: the runs already going keep room to finish. */
export const BACKGROUND_FULL_AT = 0.9;

/**
 * Whether a new background response may start, given how full `CORTEX_BACKGROUND` is (`maxBytes` -1:
 * no limit): null, or the 503 that names the stream and says what to do.
 */
export function backgroundRefusal(room: { bytes: number; maxBytes: number }): CortexError | null {
  if (room.maxBytes < 0 || room.bytes < room.maxBytes * BACKGROUND_FULL_AT) return null;
  return new CortexError(
    'service_unavailable',
    `background responses are not taken now: the stream ${BACKGROUND_STREAM}, ` +
      `which keeps their events, holds ${mib(room.bytes)} of ${mib(room.maxBytes)} ` +
      '(responses.background_max_bytes), and new ones are refused past ' +
      `${BACKGROUND_FULL_AT * 100} %. Retry once running background responses end and ` +
      `their events age out (responses.background_events_ttl_s), send the request without background, or raise the limit; ` +
      `\`nats stream purge ${BACKGROUND_STREAM}\` frees it at once, and fails the background responses still running`,
    { retryAfter: 60 },
  );
}
