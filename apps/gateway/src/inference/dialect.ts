import type { CanonicalRequest, Dialect, ErrorBody, StreamEvent } from '@cortex/contracts';

/** One SSE frame: JSON (or a raw string) data, with an `event:` line when the dialect names events. */
export interface SseOut {
  data: unknown;
  event?: string;
}

export interface DialectStream {
  frames(event: StreamEvent): SseOut[];
  /** Runs after the final event's frames are rendered and before they are written (e.g. storing the response). */
  settle?(): Promise<void>;
  /** What to send when the request fails after the response has started. */
  errorFrames(error: ErrorBody): SseOut[];
  /**
   * Frames that show a cold load's progress as reasoning text (`gateway.load_progress: reasoning`).
   * Only dialects whose streams are not stored and replayed offer it: in Responses and Anthropic
   * Messages the text would become part of the conversation the client sends back.
   */
  progress?(text: string): SseOut[];
  /** OpenAI-style `data: [DONE]` terminator. */
  readonly terminator: boolean;
}

export interface DialectBody {
  add(event: StreamEvent): void;
  body(): unknown;
  /** Runs before the body is sent. */
  settle?(): Promise<void>;
}

/** How one HTTP API renders canonical events; the request path is shared by every dialect. */
export interface DialectAdapter {
  readonly dialect: Dialect;
  stream(request: CanonicalRequest, meta: ResponseMeta, state: unknown): DialectStream;
  complete(request: CanonicalRequest, meta: ResponseMeta, state: unknown): DialectBody;
}

export interface ResponseMeta {
  /** Unique per request (the run id). */
  id: string;
  /** Seconds since the epoch when the request arrived. */
  created: number;
  /** The HTTP request headers, for dialect switches such as `x-include-thinking`. */
  headers: Record<string, string | string[] | undefined>;
  /** The fallback model serving the request, once one does (the answer names it); absent or null: the one asked for. */
  servedBy?: () => string | null;
}

/**
 * The model an answer names: the fallback that served it, once one does, else the one the request
 * asked for. Read as a getter, so options built before the run fell back name the model that served.
 */
export function answerModel(request: { model: string }, meta: ResponseMeta): { readonly model: string } {
  return {
    get model(): string {
      return meta.servedBy?.() ?? request.model;
    },
  };
}
