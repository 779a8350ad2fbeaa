import { randomBytes } from 'node:crypto';
import { fail, modelName, object, type CanonicalMessage, type Usage } from '@cortex/contracts';
import { ReasoningSeal } from './reasoning-seal.js';
import { responsesUsage } from './responses.resource.js';
import type { ResponsesCompactionItem, ResponsesItem, ResponsesUsage } from './responses.types.js';

/**
 * What the model is asked after the conversation it compacts. The summary replaces those items in
 * later prompts, so it must let the model carry on as if it had read them.
 */
export const COMPACTION_PROMPT = [
  'Write a summary of the conversation so far that lets you continue it without seeing it again.',
  'Keep: what the user asked for and their constraints, decisions made, facts and names established,',
  'tool calls made and what they returned, work done, and what is still open. Leave out pleasantries.',
  'Answer with the summary only.',
].join(' ');

/** How long a summary may grow, in tokens. */
export const COMPACTION_MAX_TOKENS = 512;

/** How a compaction item reads in a later prompt: a user turn that states what it is. */
export const COMPACTION_PREFIX = 'Summary of the earlier part of this conversation:\n';

const PLAIN_PREFIX = 'cortex.c0.';
const SEALED = { prefix: 'cortex.c1.', aad: 'cortex compaction v1' };

/**
 * A compaction item's `encrypted_content`. With `responses.reasoning_key` set it is sealed (AES-256-GCM,
 * bound to compaction, so a sealed reasoning blob cannot pass for one) and opens on any replica with the
 * same key; without a key it is the summary in base64url, readable by the client that holds it.
 */
export class CompactionSeal {
  private readonly seal: ReasoningSeal | undefined;

  constructor(secret?: string) {
    this.seal = secret ? new ReasoningSeal(secret, SEALED) : undefined;
  }

  encode(summary: string): string {
    return this.seal ? this.seal.seal(summary) : PLAIN_PREFIX + Buffer.from(summary, 'utf8').toString('base64url');
  }

  /** The summary, or undefined for content made elsewhere (another provider, another key) or altered. */
  open(content: string): string | undefined {
    return openPlain(content) ?? this.seal?.open(content);
  }
}

/** The summary of an unsealed compaction item (readable without a key), else undefined. */
export function openPlain(content: string): string | undefined {
  return content.startsWith(PLAIN_PREFIX)
    ? Buffer.from(content.slice(PLAIN_PREFIX.length), 'base64url').toString('utf8')
    : undefined;
}

/**
 * A compaction item in a later prompt; one that could not be opened is left out, like foreign reasoning,
 * and so is an empty summary (a window compacted when nothing was older than its latest user turn).
 */
export function compactionMessage(item: ResponsesCompactionItem): CanonicalMessage | undefined {
  return item.summary === undefined || item.summary === ''
    ? undefined
    : { role: 'user', content: COMPACTION_PREFIX + item.summary };
}

/**
 * `POST /v1/responses/compact` (`CompactResponseMethodPublicBody`) → the create body the conversation is
 * rebuilt from. `model` is required; what Codex sends besides (`tools`, `parallel_tool_calls`, `reasoning`,
 * `text`, `service_tier`) is accepted and left out: the summary is plain text and calls no tool.
 */
export function compactCreateBody(input: unknown): Record<string, unknown> {
  const body = object(input, 'body');
  if (body.model === undefined || body.model === null) fail('model', 'is required: the model that writes the summary');
  const model = modelName(body.model);
  if (body.background !== undefined) fail('background', 'is not accepted by /responses/compact');
  const { input: items, previous_response_id, instructions, prompt_cache_key } = body;
  return { model, input: items, previous_response_id, instructions, prompt_cache_key, store: false };
}

/** Older items are summarised; the latest user message and everything after it stay verbatim. */
export function splitForCompaction(items: readonly ResponsesItem[]): {
  older: ResponsesItem[];
  recent: ResponsesItem[];
} {
  let at = items.length;
  for (let i = items.length - 1; i >= 0; i--) {
    const item = items[i] as ResponsesItem;
    if (item.type === 'message' && item.role === 'user') {
      at = i;
      break;
    }
  }
  return { older: items.slice(0, at), recent: items.slice(at) };
}

/** An item as a client may see it: a compaction item without the opened summary the store keeps for rendering. */
export function withoutSummary(item: ResponsesItem): ResponsesItem {
  if (item.type !== 'compaction' || (item as ResponsesCompactionItem).summary === undefined) return item;
  const { summary: _summary, ...rest } = item as ResponsesCompactionItem;
  return rest as ResponsesItem;
}

/** The compaction item that holds a summary. */
export function compactionItem(summary: string, seal: CompactionSeal): ResponsesCompactionItem & { id: string } {
  return { type: 'compaction', id: `cmp_${randomBytes(16).toString('hex')}`, encrypted_content: seal.encode(summary) };
}

/** `CompactResource`. */
export interface CompactResource {
  id: string;
  object: 'response.compaction';
  created_at: number;
  output: unknown[];
  usage: ResponsesUsage;
}

/**
 * The compacted window: the summary (empty when there was nothing older to summarise), then the latest items
 * as they were, each with the `status` an output item carries. Usable as the `input` of a new response.
 */
export function compactResource(
  recent: readonly ResponsesItem[],
  summary: ResponsesCompactionItem & { id: string },
  usage: Usage,
): CompactResource {
  const kept = recent.map((item) => {
    if (item.type === 'compaction') return { type: item.type, id: item.id, encrypted_content: item.encrypted_content };
    return item.type === 'message' || item.type === 'function_call' || item.type === 'function_call_output'
      ? { ...item, status: item.status ?? 'completed' }
      : item;
  });
  return {
    id: `resp_${randomBytes(16).toString('hex')}`,
    object: 'response.compaction',
    created_at: Math.floor(Date.now() / 1000),
    output: [{ type: summary.type, id: summary.id, encrypted_content: summary.encrypted_content }, ...kept],
    usage: responsesUsage(usage),
  };
}
