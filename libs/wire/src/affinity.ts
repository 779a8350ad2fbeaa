/**
 * Affinity keys name a conversation across requests so the router can send its follow-ups to the
 * worker that holds its prompt prefix. Each source gets a prefix, so values from different sources
 * never meet; the same session seen through a header or through Anthropic metadata gives one key.
 */
export const affinityKey = {
  session: (id: string): string => `session:${id.slice(0, MAX_KEY)}`,
  promptCacheKey: (key: string): string => `pck:${key.slice(0, MAX_KEY)}`,
  conversation: (id: string): string => `conv:${id.slice(0, MAX_KEY)}`,
  response: (id: string): string => `resp:${id.slice(0, MAX_KEY)}`,
};

/** Client-chosen ids are cut here, so every key fits the bus contracts' 512 characters. */
const MAX_KEY = 256;

/** The first non-empty header of `names` (see `gateway.session_headers`), as an affinity key. */
export function sessionFromHeaders(headers: Record<string, string | string[] | undefined>, names: readonly string[]): string | undefined {
  for (const name of names) {
    const raw = headers[name.toLowerCase()];
    const value = (Array.isArray(raw) ? raw[0] : raw)?.trim();
    if (value) return affinityKey.session(value);
  }
  return undefined;
}

/**
 * The session inside Anthropic `metadata.user_id`, as Claude Code writes it: a JSON object with
 * `session_id`, or the older `user_<hash>_account_<id>_session_<uuid>`. Anything else is a user, not
 * a session, and gives no key.
 */
export function sessionFromAnthropicUserId(userId: unknown): string | undefined {
  if (typeof userId !== 'string' || userId.length === 0) return undefined;
  if (userId.startsWith('{')) {
    try {
      const parsed = JSON.parse(userId) as { session_id?: unknown };
      return typeof parsed.session_id === 'string' && parsed.session_id ? affinityKey.session(parsed.session_id) : undefined;
    } catch {
      return undefined;
    }
  }
  const legacy = /_session_([A-Za-z0-9-]{1,128})$/.exec(userId);
  return legacy?.[1] ? affinityKey.session(legacy[1]) : undefined;
}
