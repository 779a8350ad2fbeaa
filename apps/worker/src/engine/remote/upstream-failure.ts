import { CortexError } from '@cortex/contracts';

/** What an upstream's refusal means for the request: its own fault (4xx), or the upstream's (another place may serve it). */
export interface UpstreamRefusal {
  status: number;
  /** The upstream's own words, from its error body (bounded). */
  message: string;
  /** Seconds, from its `Retry-After` header. */
  retryAfter?: number;
  /** Who the upstream is, for the message: `api.openai.com (chat)`. */
  upstream: string;
}

/**
 * An upstream's HTTP refusal as cortex's error, so the gateway knows whether to try elsewhere: a 429
 * is `upstream_rate_limited` (the next place is tried; its `Retry-After` is passed on), a 5xx, a 408,
 * or a 401, 403 or 404 (cortex's own credential, route or model name is wrong, not the client's
 * request) `upstream_unavailable`; any other 4xx is the request's fault and reaches the client as
 * `invalid_request` (413: `payload_too_large`) with the upstream's message, never retried away.
 */
export function upstreamRefusal(refusal: UpstreamRefusal): CortexError {
  const { status, message, upstream } = refusal;
  const said = message ? `: ${message}` : '';
  const retry = refusal.retryAfter !== undefined ? { retryAfter: refusal.retryAfter } : {};
  if (status === 429)
    return new CortexError('upstream_rate_limited', `the upstream ${upstream} is rate limited (429)${said}`, {
      retryAfter: refusal.retryAfter ?? 1,
    });
  if (status === 401 || status === 403)
    return new CortexError(
      'upstream_unavailable',
      `the upstream ${upstream} refused cortex's credential (${status})${said}; check the model's upstream ` +
        'api_key_env or api_key_file on the remote worker',
      retry,
    );
  if (status === 404)
    return new CortexError(
      'upstream_unavailable',
      `the upstream ${upstream} answered 404${said}; check the model's upstream url and model name`,
      retry,
    );
  if (status === 408 || status >= 500)
    return new CortexError('upstream_unavailable', `the upstream ${upstream} failed (${status})${said}`, retry);
  if (status === 413)
    return new CortexError('payload_too_large', `the upstream ${upstream} refused the request as too large${said}`);
  return new CortexError('invalid_request', `the upstream ${upstream} refused the request (${status})${said}`, {
    ...paramOf(message),
  });
}

/** A `Retry-After` header in seconds (a number of seconds, or an HTTP date), at most an hour; absent when unreadable. */
export function retryAfterSeconds(header: string | null, now = Date.now()): number | undefined {
  if (!header) return undefined;
  const seconds = /^\s*\d+\s*$/.test(header) ? Number(header) : (Date.parse(header) - now) / 1000;
  if (!Number.isFinite(seconds)) return undefined;
  return Math.min(3600, Math.max(0, Math.ceil(seconds)));
}

/** The upstream's error message from its body: OpenAI's and Anthropic's `error.message`, or the text itself, bounded. */
export function errorMessage(text: string): string {
  try {
    const body = JSON.parse(text) as { error?: { message?: unknown } | string; message?: unknown; detail?: unknown };
    const error = body.error;
    const said =
      typeof error === 'string'
        ? error
        : typeof error?.message === 'string'
          ? error.message
          : typeof body.message === 'string'
            ? body.message
            : typeof body.detail === 'string'
              ? body.detail
              : undefined;
    if (said !== undefined) return said.slice(0, 1_000);
  } catch {
    // Not JSON: the text as it is.
  }
  return text.replace(/\s+/g, ' ').trim().slice(0, 1_000);
}

/** The field an upstream's 400 names at the start of its message (`temperature: …`), so the client's error names it too. */
function paramOf(message: string): { param?: string } {
  const match = /^([a-z_][a-z0-9_.[\]]*): /i.exec(message);
  return match?.[1] ? { param: match[1] } : {};
}
