import { createHash } from 'node:crypto';
import type { CanonicalRequest } from '@cortex/contracts';

/** At most this many prefixes go with a placement: a follow-up's earlier request ends a few messages back. */
export const MAX_PROMPT_PREFIXES = 32;

/**
 * Digests of a request's prompt at each message boundary, the whole prompt first and then shorter
 * ones (at most MAX_PROMPT_PREFIXES). Each covers the model, the tools and the template options (they
 * change the prompt's start) and the messages up to that boundary, so a follow-up, which re-sends its
 * conversation and adds to it, has the earlier request's whole-prompt digest among its own. The
 * router remembers where each request's whole prompt went and sends a request whose prefix it knows
 * there (`router.affinity`), without a session key. One pass over the messages: linear in their size.
 */
export function promptPrefixes(
  request: Pick<CanonicalRequest, 'model' | 'messages' | 'tools' | 'templateOptions' | 'raw'>,
): string[] {
  if (request.raw || request.messages.length === 0) return [];
  const hash = createHash('sha256');
  hash
    .update(request.model)
    .update('\0')
    .update(JSON.stringify(request.tools ?? []))
    .update('\0')
    .update(JSON.stringify(request.templateOptions ?? {}));
  const first = Math.max(0, request.messages.length - MAX_PROMPT_PREFIXES);
  const prefixes: string[] = [];
  request.messages.forEach((message, i) => {
    hash.update('\0').update(JSON.stringify(message));
    if (i >= first) prefixes.push(hash.copy().digest('base64url').slice(0, 22));
  });
  return prefixes.reverse();
}
