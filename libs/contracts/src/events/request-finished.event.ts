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
  finishedAt: number;
}

/** Every few seconds from each service, for bus health metrics. */
export interface BusStatusEvent {
  service: string;
  instance: string;
  connected: boolean;
  reconnects: number;
  intervalMs: number;
}
