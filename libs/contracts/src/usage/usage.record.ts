import { integer, number, object, oneOf, string } from '../fields.js';
import { DIALECTS, type Dialect } from '../generate/generate.messages.js';
import { RETRIEVAL_APIS, type RetrievalApi } from '../retrieval/retrieval.messages.js';
import type { RequestFinishedEvent } from '../events/request-finished.event.js';

/**
 * gateway → `CORTEX_USAGE` stream: one per run that used tokens, the line a bill is made of. Stored
 * with the run id as its message id, so a retried publish is kept once. snake_case like the admin API
 * that answers usage queries from it.
 */
export interface UsageRecord {
  /** The run id: unique per run, the message id. */
  id: string;
  request_id: string;
  /** The stored key's account and id; null for a config-file key or no key. */
  account: string | null;
  key_id: string | null;
  model: string;
  /** The API the request came in on (chat, completions, responses, messages, embeddings, rerank…). */
  api: Dialect | RetrievalApi;
  stream: boolean;
  prompt_tokens: number;
  cached_prompt_tokens: number;
  completion_tokens: number;
  reasoning_tokens: number;
  /** When the request finished, ms since the epoch. */
  at: number;
  /** What its tokens cost at the model's price when it was recorded (`billing.currency`); absent: the model had no price. */
  cost?: number;
}

/** A model's prices per million tokens (the catalogue's `cost`). */
export interface TokenPrice {
  input: number;
  /** Prompt tokens from a reused prefix; absent: `input`. */
  cachedInput?: number;
  output: number;
}

/** What a record's tokens cost at `price`, to the billionth of the currency. */
export function costOf(
  record: Pick<UsageRecord, 'prompt_tokens' | 'cached_prompt_tokens' | 'completion_tokens'>,
  price: TokenPrice,
): number {
  const fresh = record.prompt_tokens - record.cached_prompt_tokens;
  const cached = record.cached_prompt_tokens * (price.cachedInput ?? price.input);
  const total = (fresh * price.input + cached + record.completion_tokens * price.output) / 1e6;
  return toBillionth(total);
}

/** An amount of money to the billionth of its currency: what a record's cost and a sum of them are kept to. */
export function toBillionth(amount: number): number {
  return billionthsOf(amount) / 1e9;
}

/**
 * An amount of money as a whole number of billionths of its currency. Budgets add these up: a sum of
 * integers stays exact where a sum of fractions would drift.
 */
export function billionthsOf(amount: number): number {
  return Math.round(amount * 1e9);
}

/** Who a request was made by, as far as billing cares. */
export interface UsageOwner {
  account: string;
  keyId: string;
}

/** The usage record of a finished run, or null when it used no tokens at all (nothing to bill). */
export function usageRecordOf(
  event: RequestFinishedEvent,
  owner: UsageOwner | null,
  runId: string,
  /** The model's price now (the live catalogue's `cost`), if it has one. */
  price?: TokenPrice,
): UsageRecord | null {
  const usage = event.usage;
  if (!usage || usage.promptTokens + usage.completionTokens === 0) return null;
  const record: UsageRecord = {
    id: runId,
    request_id: event.requestId,
    account: owner?.account ?? null,
    key_id: owner?.keyId ?? null,
    model: event.model,
    api: event.dialect,
    stream: event.stream,
    prompt_tokens: usage.promptTokens,
    cached_prompt_tokens: usage.cachedPromptTokens,
    completion_tokens: usage.completionTokens,
    reasoning_tokens: usage.reasoningTokens,
    at: event.finishedAt,
  };
  if (price) record.cost = costOf(record, price);
  return record;
}

/** Reads a stored record; the first bad field throws naming it (the reader logs and skips that one). */
export function decodeUsageRecord(value: unknown): UsageRecord {
  const record = object(value, 'usage record');
  return {
    id: string(record.id, 'id'),
    request_id: string(record.request_id, 'request_id'),
    account: nullable(record.account, (v) => string(v, 'account')),
    key_id: nullable(record.key_id, (v) => string(v, 'key_id')),
    model: string(record.model, 'model'),
    api: oneOf(record.api, 'api', [...DIALECTS, ...RETRIEVAL_APIS]),
    stream: record.stream === true,
    prompt_tokens: integer(record.prompt_tokens, 'prompt_tokens', 0),
    cached_prompt_tokens: integer(record.cached_prompt_tokens, 'cached_prompt_tokens', 0),
    completion_tokens: integer(record.completion_tokens, 'completion_tokens', 0),
    reasoning_tokens: integer(record.reasoning_tokens, 'reasoning_tokens', 0),
    at: integer(record.at, 'at', 0),
    ...(record.cost !== undefined && record.cost !== null && { cost: number(record.cost, 'cost', 0) }),
  };
}

function nullable<T>(value: unknown, read: (value: unknown) => T): T | null {
  return value === null || value === undefined ? null : read(value);
}
