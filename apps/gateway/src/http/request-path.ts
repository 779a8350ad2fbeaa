import type { FastifyRequest } from 'fastify';

/**
 * The path access and limit checks look at: the pattern of the route the router matched
 * (`/admin/keys/:id`), else the URL's path percent-decoded. The router decodes a path before it
 * matches it, so checking the raw URL would let `/%61dmin/keys` past a check on `/admin/`.
 */
export function requestPath(request: Pick<FastifyRequest, 'url' | 'routeOptions'>): string {
  const pattern = request.routeOptions?.url;
  if (pattern) return pattern;
  const raw = request.url.split('?')[0] ?? '';
  if (!raw.includes('%')) return raw;
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}
