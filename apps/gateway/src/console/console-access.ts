import type { FastifyRequest } from 'fastify';

/** The cookie a browser keeps the console's admin key in (HttpOnly, SameSite=Strict). */
export const CONSOLE_COOKIE = 'cortex_console';
const COOKIE_MAX_AGE_S = 12 * 3600;

/** The console page and its assets: admin routes, like `/admin/…`. */
export function isConsolePath(path: string): boolean {
  return path === '/console' || path.startsWith('/console/');
}

/**
 * A key a browser presents without headers: `/console?key=…` once (the page then sets the cookie and
 * drops the key from the address bar), then the cookie on every same-origin request the page makes.
 * `allowedOrigins`: origins besides the gateway's own (`gateway.allowed_origins`) whose pages may
 * use the cookie.
 */
export function browserKey(
  request: FastifyRequest,
  path: string,
  allowedOrigins: readonly string[] = [],
): string | undefined {
  if (path === '/console') {
    const key = (request.query as Record<string, unknown> | undefined)?.key;
    if (typeof key === 'string' && key) return key;
  }
  const cookie = cookieValue(request.headers.cookie, CONSOLE_COOKIE);
  if (!cookie) return undefined;
  // A cookie rides along on requests that other pages of the same site make. Only the console's own
  // kinds count: same-origin (when the browser says), and a GET or a JSON body — a form or a no-cors
  // fetch from another page cannot send application/json without a preflight.
  const site = request.headers['sec-fetch-site'];
  if (site !== undefined && site !== 'same-origin' && site !== 'none') return undefined;
  // A browser names the page's origin on every WebSocket upgrade and every fetch but a same-origin
  // GET; over plain http to a host that is not localhost it sends no Sec-Fetch-*, and a SameSite
  // cookie still goes along from a sibling port or subdomain. So the origin must be this gateway's
  // (or an allowed one), and an upgrade must name it.
  const origin = request.headers.origin;
  // The host the browser used: X-Forwarded-Host from a trusted proxy (gateway.trust_proxy), else Host.
  const host = (request as { host?: string }).host ?? request.headers.host;
  if (origin === undefined ? request.headers.upgrade !== undefined : !ownOrigin(origin, host, allowedOrigins))
    return undefined;
  if (
    request.method !== 'GET' &&
    request.method !== 'HEAD' &&
    !String(request.headers['content-type'] ?? '').startsWith('application/json')
  )
    return undefined;
  return cookie;
}

/** Whether `origin` (a request's Origin header) is the gateway's own, as the request's Host names it, or one allowed. */
export function ownOrigin(origin: string, host: string | undefined, allowedOrigins: readonly string[]): boolean {
  if (allowedOrigins.includes(origin)) return true;
  try {
    const url = new URL(origin);
    return (
      (url.protocol === 'http:' || url.protocol === 'https:') && host !== undefined && url.host === host.toLowerCase()
    );
  } catch {
    // `null` (a sandboxed page, a file) or no URL at all.
    return false;
  }
}

export function cookieValue(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const at = part.indexOf('=');
    if (at === -1 || part.slice(0, at).trim() !== name) continue;
    try {
      return decodeURIComponent(part.slice(at + 1).trim()) || undefined;
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/**
 * The cookie that keeps the key: HttpOnly (no script reads it), SameSite=Strict (no other site's page
 * can make a request that carries it), Secure when the page came over TLS.
 */
export function consoleCookie(key: string, secure: boolean): string {
  return (
    `${CONSOLE_COOKIE}=${encodeURIComponent(key)}; Path=/; HttpOnly; ` +
    `SameSite=Strict; Max-Age=${COOKIE_MAX_AGE_S}${secure ? '; Secure' : ''}`
  );
}
