import type { Dialect, FinishReason, Timings, Usage } from '../generate/generate.messages.js';
import type { ErrorCode } from '../errors/error-codes.js';
import type { RetrievalApi } from '../retrieval/retrieval.messages.js';

/** gateway → metrics: one per HTTP request that reached the inference path, success or not. */
export interface RequestFinishedEvent {
  requestId: string;
  model: string;
  workerId: string | null;
  /** The API the request came in on: a generation dialect, or embeddings / rerank. */
  dialect: Dialect | RetrievalApi;
  stream: boolean;
  /** HTTP status the client saw (200 for a stream that later failed mid-way is reported with errorCode). */
  status: number;
  errorCode: ErrorCode | null;
  finishReason: FinishReason | null;
  usage: Usage | null;
  timings: Timings | null;
  /** Gateway-side wall time from request arrival to the last byte. */
  durationMs: number;
  /** The request waited for its model to load. */
  coldStart: boolean;
  /** Round trip of the placement request to the router (cold loads included), or null if not placed. */
  placeMs: number | null;
  /** Where a stream's time to first byte went inside the gateway; null without a first token. */
  hops?: GatewayHops | null;
  /** Times the stream moved to another worker after its worker was lost (absent: none). */
  migrations?: number;
  finishedAt: number;
  /** The priority tier it ran at (0: no key; see RequestPriority); absent in events from earlier versions. */
  tier?: number;
}

/**
 * The gateway's part of time to first byte, in ms, hop by hop (`npm run bench:gateway` prints it).
 * The worker's part (queue, template and tokenizing, prompt evaluation) is in `timings`.
 */
export interface GatewayHops {
  /** Request arrival → handler: reading and parsing the body, access checks. */
  parseMs: number;
  /** The translator's decode round trip. */
  decodeMs: number;
  /**
   * Decoded → placed: the wait for the router beyond decoding (it is asked while the translator
   * decodes, see PlaceRequest.readyOnly); the whole placement when that answer could not be used.
   * Absent in events from earlier versions.
   */
  placeMs?: number;
  /** `generate` sent → the worker's acceptance. */
  generateMs: number;
  /** Acceptance → the first token's event read from the bus (the worker's time to first token, mostly). */
  firstEventMs: number;
  /** That event → its frame written to the client's socket. */
  writeMs: number;
}

/** Every few seconds from each service, for bus health metrics. */
export interface BusStatusEvent {
  service: string;
  instance: string;
  connected: boolean;
  reconnects: number;
  intervalMs: number;
  /** What a gateway turned clients away for since it started, by reason (cumulative; see the gateway's RefusalCounter). */
  refusals?: Record<string, number>;
}
