/**
 * One registry of error codes with their HTTP status. Bus replies carry the code; each HTTP dialect
 * maps it to its own error body (see @cortex/wire).
 */
export const ErrorCodes = {
  invalid_request: { status: 400, type: 'invalid_request_error' },
  unauthorized: { status: 401, type: 'authentication_error' },
  /** A key revoked by `cortex keys revoke` or the admin API. */
  key_revoked: { status: 401, type: 'authentication_error' },
  /** A key past its `expires_at` (or an old secret past its rotation grace period). */
  key_expired: { status: 401, type: 'authentication_error' },
  /** The key may not use this model (its `models` list). */
  permission_denied: { status: 403, type: 'permission_error' },
  model_not_found: { status: 404, type: 'not_found_error' },
  not_found: { status: 404, type: 'not_found_error' },
  previous_response_not_found: { status: 404, type: 'invalid_request_error' },
  /** A Responses WebSocket was open for its time limit (`responses.websocket_connection_limit_ms`): open a new one. */
  websocket_connection_limit_reached: { status: 400, type: 'invalid_request_error' },
  payload_too_large: { status: 413, type: 'invalid_request_error' },
  busy: { status: 429, type: 'rate_limit_error' },
  /** A key's or account's window (requests per minute, concurrent requests) is used up: retry after `retryAfter`. */
  rate_limit_exceeded: { status: 429, type: 'rate_limit_error' },
  /** A key's or account's token budget is spent: retrying does not help until it resets or is raised (`x-should-retry: false`). */
  insufficient_quota: { status: 429, type: 'insufficient_quota' },
  no_worker: { status: 503, type: 'service_unavailable' },
  service_unavailable: { status: 503, type: 'service_unavailable' },
  model_load_failed: { status: 503, type: 'service_unavailable' },
  /** The worker answered but no longer (or not yet) holds the model, e.g. it is being swapped out. */
  model_not_ready: { status: 503, type: 'service_unavailable' },
  insufficient_memory: { status: 503, type: 'service_unavailable' },
  timeout: { status: 504, type: 'timeout_error' },
  /**
   * An upstream (a remote model's server or API) failed the request: unreachable, timed out, a 5xx, or
   * refused cortex's own credential. Another place may serve it; the client is not at fault.
   */
  upstream_unavailable: { status: 502, type: 'api_error' },
  /** An upstream answered 429: another place may serve the request; the last one's `retryAfter` is passed on. */
  upstream_rate_limited: { status: 429, type: 'rate_limit_error' },
  worker_lost: { status: 502, type: 'api_error' },
  /** The model's output broke the request's JSON schema (response format or tool parameters): never sent as success. */
  invalid_output: { status: 502, type: 'api_error' },
  /** The request was cancelled (its client went away, or a model unload ended it): not a fault. */
  cancelled: { status: 499, type: 'api_error' },
  internal: { status: 500, type: 'api_error' },
} as const satisfies Record<string, { status: number; type: string }>;

export type ErrorCode = keyof typeof ErrorCodes;

export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === 'string' && Object.hasOwn(ErrorCodes, value);
}

/** The error body every bus reply and stream error event carries. */
export interface ErrorBody {
  code: ErrorCode;
  message: string;
  /** The request field at fault, e.g. `messages[0].role`. */
  param?: string;
  /** Seconds a client should wait before retrying (503/429). */
  retryAfter?: number;
}

/** An error with a registered code; thrown anywhere, rendered at the HTTP edge in the caller's dialect. */
export class CortexError extends Error {
  override readonly name = 'CortexError';
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly extra: { param?: string; retryAfter?: number; cause?: unknown } = {},
  ) {
    super(message, extra.cause === undefined ? undefined : { cause: extra.cause });
  }

  get status(): number {
    return ErrorCodes[this.code].status;
  }

  toBody(): ErrorBody {
    const body: ErrorBody = { code: this.code, message: this.message };
    if (this.extra.param !== undefined) body.param = this.extra.param;
    if (this.extra.retryAfter !== undefined) body.retryAfter = this.extra.retryAfter;
    return body;
  }

  static fromBody(body: ErrorBody): CortexError {
    return new CortexError(isErrorCode(body.code) ? body.code : 'internal', body.message, {
      param: body.param,
      retryAfter: body.retryAfter,
    });
  }
}
