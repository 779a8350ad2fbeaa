import { isObject, object, oneOf } from '@cortex/contracts';

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
export function sessionFromHeaders(
  headers: Record<string, string | string[] | undefined>,
  names: readonly string[],
): string | undefined {
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
      return typeof parsed.session_id === 'string' && parsed.session_id
        ? affinityKey.session(parsed.session_id)
        : undefined;
    } catch {
      return undefined;
    }
  }
  const legacy = /_session_([A-Za-z0-9-]{1,128})$/.exec(userId);
  return legacy?.[1] ? affinityKey.session(legacy[1]) : undefined;
}

/** What the router can be asked before the translator has decoded a body (see `placementHint`). */
export interface PlacementHint {
  model: string;
  affinity?: string;
}

/**
 * The model a Responses body names and the affinity key its decoded request will carry, read without
 * decoding it, so the gateway can ask the router while the translator decodes (the other dialects'
 * bodies decode in the gateway). A guess the gateway checks: it keeps the answer only when the decoded
 * request names the same model and key. Null when the body names no model, and without a session or
 * cache key: the translator keys those by the response chain (`resp:<id>` of its first response, or
 * the conversation), which the body does not show.
 */
export function placementHint(body: unknown, session: string | undefined): PlacementHint | null {
  if (!isObject(body) || typeof body.model !== 'string' || body.model === '') return null;
  const affinity = session ?? cacheKeyOf(body);
  return affinity ? { model: body.model, affinity } : null;
}

function cacheKeyOf(body: Record<string, unknown>): string | undefined {
  return typeof body.prompt_cache_key === 'string' && body.prompt_cache_key
    ? affinityKey.promptCacheKey(body.prompt_cache_key)
    : undefined;
}

/**
 * OpenAI's `prompt_cache_retention` (Chat Completions, Responses): `24h` asks for the prompt to be
 * kept longer (CanonicalRequest.keepPromptLonger); `in_memory` (or nothing) is what the worker does anyway.
 */
export function keepsPromptLonger(value: unknown): boolean {
  if (value === undefined || value === null) return false;
  return oneOf(value, 'prompt_cache_retention', ['in_memory', 'in-memory', '24h'] as const) === '24h';
}

/**
 * Anthropic `cache_control` breakpoints on the system prompt, the tools or any message block: one
 * with `ttl: "1h"` asks for the prompt to be kept longer (CanonicalRequest.keepPromptLonger); the
 * default five minutes is what the worker does anyway. Each one's `ttl`, when given, must be `5m`
 * or `1h`.
 */
export function cacheControlKeepsLonger(body: Record<string, unknown>): boolean {
  let longer = false;
  const look = (block: unknown, param: string): void => {
    if (!isObject(block) || block.cache_control === undefined || block.cache_control === null) return;
    const control = object(block.cache_control, `${param}.cache_control`);
    if (control.ttl !== undefined && control.ttl !== null)
      longer = oneOf(control.ttl, `${param}.cache_control.ttl`, ['5m', '1h'] as const) === '1h' || longer;
  };
  const blocks = (value: unknown, param: string): void => {
    if (Array.isArray(value)) value.forEach((block, i) => look(block, `${param}[${i}]`));
  };
  blocks(body.system, 'system');
  blocks(body.tools, 'tools');
  if (Array.isArray(body.messages))
    body.messages.forEach((message, i) => isObject(message) && blocks(message.content, `messages[${i}].content`));
  return longer;
}
