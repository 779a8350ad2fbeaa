import {
  array,
  boolean,
  defined,
  fail,
  integer,
  number,
  object,
  oneOf,
  optionalBoolean,
  optionalInteger,
  optionalNumber,
  optionalString,
  string,
  type Json,
} from '../fields.js';
import { ErrorCodes, type ErrorCode } from '../errors/error-codes.js';
import { MCP_CALL_OUTCOMES, type McpToolCalledEvent } from '../mcp/mcp-servers.js';
import {
  DIALECTS,
  type FinishReason,
  type StreamEvent,
  type Timings,
  type Usage,
} from '../generate/generate.messages.js';
import {
  LOAD_TRIGGERS,
  REPLICA_ADD_REASONS,
  REPLICA_BLOCK_REASONS,
  REPLICA_RETIRE_REASONS,
  WORKER_DOWN_REASONS,
  type DefragEvent,
  type LoadFailedEvent,
  type LoadProgress,
  type ReplicaEvent,
  type WorkerLifecycleEvent,
} from '../fleet/fleet.messages.js';
import type { BusStatusEvent, GatewayHops, RequestFinishedEvent } from './request-finished.event.js';
import { RETRIEVAL_APIS } from '../retrieval/retrieval.messages.js';

/**
 * Readers for the events metrics consumes. An event comes from another process, possibly another
 * version: each field the consumer reads is checked, and the first bad one throws `invalid_request`
 * naming it, so the consumer can log and skip that one event.
 */
const FINISH_REASONS = [
  'stop',
  'length',
  'tool_calls',
  'cancelled',
  'error',
] as const satisfies readonly FinishReason[];

const ERROR_CODES = Object.keys(ErrorCodes) as ErrorCode[];

export function decodeRequestFinished(value: unknown): RequestFinishedEvent {
  const event = object(value, 'event');
  return {
    requestId: string(event.requestId, 'requestId'),
    model: string(event.model, 'model'),
    workerId: nullable(event.workerId, (v) => string(v, 'workerId')),
    dialect: oneOf(event.dialect, 'dialect', [...DIALECTS, ...RETRIEVAL_APIS]),
    stream: boolean(event.stream, 'stream'),
    status: integer(event.status, 'status', 100),
    errorCode: nullable(event.errorCode, (v) => oneOf(v, 'errorCode', ERROR_CODES)),
    finishReason: nullable(event.finishReason, (v) => oneOf(v, 'finishReason', FINISH_REASONS)),
    usage: nullable(event.usage, (v) => usage(object(v, 'usage'))),
    timings: nullable(event.timings, (v) => timings(object(v, 'timings'))),
    durationMs: number(event.durationMs, 'durationMs'),
    coldStart: boolean(event.coldStart, 'coldStart'),
    placeMs: nullable(event.placeMs, (v) => number(v, 'placeMs')),
    hops: nullable(event.hops, (v) => hops(object(v, 'hops'))),
    ...(event.migrations !== undefined && { migrations: integer(event.migrations, 'migrations', 0) }),
    finishedAt: number(event.finishedAt, 'finishedAt'),
    ...(event.tier !== undefined && event.tier !== null && { tier: integer(event.tier, 'tier', 0) }),
  };
}

export function decodeWorkerLifecycle(value: unknown): WorkerLifecycleEvent {
  const event = object(value, 'event');
  return {
    workerId: string(event.workerId, 'workerId'),
    at: number(event.at, 'at'),
    ...(event.reason != null && { reason: oneOf(event.reason, 'reason', WORKER_DOWN_REASONS) }),
  };
}

export function decodeLoadFailed(value: unknown): LoadFailedEvent {
  const event = object(value, 'event');
  const cancelled = event.cancelled == null ? undefined : boolean(event.cancelled, 'cancelled');
  return {
    workerId: string(event.workerId, 'workerId'),
    at: number(event.at, 'at'),
    model: string(event.model, 'model'),
    error: string(event.error, 'error'),
    ...(cancelled && { cancelled }),
  };
}

/** A replication event; `kind` is the subject's last token (added, retired, blocked), which sets the reasons allowed. */
export function decodeReplicaEvent(value: unknown, kind: 'added' | 'retired' | 'blocked'): ReplicaEvent {
  const event = object(value, 'event');
  const reasons =
    kind === 'added' ? REPLICA_ADD_REASONS : kind === 'retired' ? REPLICA_RETIRE_REASONS : REPLICA_BLOCK_REASONS;
  const workerId = kind === 'blocked' ? optionalString(event.workerId, 'workerId') : string(event.workerId, 'workerId');
  return {
    model: string(event.model, 'model'),
    ...(workerId !== undefined && { workerId }),
    reason: oneOf(event.reason, 'reason', reasons),
    at: number(event.at, 'at'),
  };
}

/** A gateway's MCP tool call (see McpToolCalledEvent). */
export function decodeMcpToolCalled(value: unknown): McpToolCalledEvent {
  const event = object(value, 'event');
  return {
    requestId: string(event.requestId, 'requestId'),
    server: string(event.server, 'server'),
    tool: string(event.tool, 'tool'),
    outcome: oneOf(event.outcome, 'outcome', MCP_CALL_OUTCOMES),
    durationMs: number(event.durationMs, 'durationMs'),
    at: number(event.at, 'at'),
  };
}

export function decodeDefrag(value: unknown): DefragEvent {
  const event = object(value, 'event');
  return {
    workerId: string(event.workerId, 'workerId'),
    at: number(event.at, 'at'),
    cycles: integer(event.cycles, 'cycles', 0),
    dropped: array(event.dropped, 'dropped').map((model, i) => string(model, `dropped[${i}]`)),
  };
}

/** A model load's progress (core NATS, while the load runs). */
export function decodeLoadProgress(value: unknown): LoadProgress {
  const event = object(value, 'event');
  const fraction = number(event.fraction, 'fraction', 0);
  if (fraction > 1) fail('fraction', `must be at most 1, got ${fraction}`);
  const phase =
    event.phase === undefined ? undefined : oneOf(event.phase, 'phase', ['downloading', 'loading'] as const);
  const bytes = optionalNumber(event.bytes, 'bytes', 0, Number.MAX_SAFE_INTEGER);
  const totalBytes = optionalNumber(event.totalBytes, 'totalBytes', 0, Number.MAX_SAFE_INTEGER);
  return {
    workerId: string(event.workerId, 'workerId'),
    model: string(event.model, 'model'),
    fraction,
    ...(phase && { phase }),
    ...(bytes !== undefined && { bytes }),
    ...(totalBytes !== undefined && { totalBytes }),
    ...(event.trigger != null && { trigger: oneOf(event.trigger, 'trigger', LOAD_TRIGGERS) }),
  };
}

export function decodeBusStatus(value: unknown): BusStatusEvent {
  const event = object(value, 'event');
  return {
    service: string(event.service, 'service'),
    instance: string(event.instance, 'instance'),
    connected: boolean(event.connected, 'connected'),
    reconnects: integer(event.reconnects, 'reconnects', 0),
    intervalMs: number(event.intervalMs, 'intervalMs', 1),
    ...defined({ refusals: refusalCounts(event.refusals) }),
  };
}

/** Counts by reason: at most 32 reasons of at most 64 characters each, each a count. */
function refusalCounts(value: unknown): Record<string, number> | undefined {
  if (value === undefined || value === null) return undefined;
  const counts = object(value, 'refusals');
  const entries = Object.entries(counts);
  if (entries.length > 32) fail('refusals', `has ${entries.length} reasons; at most 32`);
  for (const [reason, count] of entries) {
    if (!/^[a-z_]{1,64}$/.test(reason))
      fail(`refusals.${reason.slice(0, 64)}`, 'must be a reason of lowercase letters and underscores');
    integer(count, `refusals.${reason}`, 0);
  }
  return counts as Record<string, number>;
}

const STREAM_EVENT_TYPES = [
  'start',
  'text',
  'reasoning',
  'tool_call',
  'tool_args',
  'keepalive',
  'finish',
  'error',
] as const;

/**
 * One event of a token stream, as a gateway receives it. Hand-written and flat: it runs once per
 * delivered event, i.e. on the token path.
 */
export function decodeStreamEvent(value: unknown): StreamEvent {
  const event = object(value, 'event');
  integer(event.seq, 'seq', 0);
  switch (oneOf(event.type, 'type', STREAM_EVENT_TYPES)) {
    case 'text':
    case 'reasoning':
      string(event.text, 'text');
      optionalInteger(event.pieces, 'pieces', 1);
      tokenIds(event.tokens);
      if (event.logprobs !== undefined) tokenLogprobs(event.logprobs);
      break;
    case 'start':
      string(event.runId, 'runId');
      string(event.workerId, 'workerId');
      string(event.model, 'model');
      integer(event.promptTokens, 'promptTokens', 0);
      optionalInteger(event.cachedPromptTokens, 'cachedPromptTokens', 0);
      if (event.reasoningMarkers !== undefined) {
        const markers = event.reasoningMarkers as unknown;
        if (
          !Array.isArray(markers) ||
          markers.length !== 2 ||
          markers.some((marker) => typeof marker !== 'string' || marker.length > 64)
        ) {
          fail('reasoningMarkers', 'must be two strings of at most 64 characters');
        }
      }
      break;
    case 'tool_call':
      integer(event.index, 'index', 0);
      string(event.id, 'id');
      string(event.name, 'name');
      tokenIds(event.tokens);
      break;
    case 'tool_args':
      integer(event.index, 'index', 0);
      string(event.delta, 'delta');
      tokenIds(event.tokens);
      break;
    case 'finish':
      oneOf(event.reason, 'reason', FINISH_REASONS);
      usage(object(event.usage, 'usage'));
      timings(object(event.timings, 'timings'));
      optionalString(event.stopSequence, 'stopSequence');
      break;
    case 'error': {
      const error = object(event.error, 'error');
      string(error.code, 'error.code');
      string(error.message, 'error.message');
      optionalString(error.param, 'error.param');
      optionalNumber(error.retryAfter, 'error.retryAfter', 0, Number.MAX_SAFE_INTEGER);
      optionalBoolean(event.moving, 'moving');
      break;
    }
    case 'keepalive':
      optionalBoolean(event.moving, 'moving');
      break;
  }
  return event as unknown as StreamEvent;
}

/** An output event's token ids (absent from workers of earlier versions). */
function tokenLogprobs(value: unknown): void {
  array(value, 'logprobs').forEach((entry, i) => {
    const at = `logprobs[${i}]`;
    const e = object(entry, at);
    string(e.token, `${at}.token`);
    if (e.logprob !== null) number(e.logprob, `${at}.logprob`);
    array(e.bytes, `${at}.bytes`);
    array(e.top, `${at}.top`).forEach((alternative, j) => {
      const a = object(alternative, `${at}.top[${j}]`);
      string(a.token, `${at}.top[${j}].token`);
      number(a.logprob, `${at}.top[${j}].logprob`);
    });
  });
}

function tokenIds(value: unknown): void {
  if (value === undefined) return;
  array(value, 'tokens').forEach((token, i) => integer(token, `tokens[${i}]`, 0));
}

function usage(value: Json): Usage {
  return {
    promptTokens: integer(value.promptTokens, 'usage.promptTokens', 0),
    cachedPromptTokens: integer(value.cachedPromptTokens, 'usage.cachedPromptTokens', 0),
    completionTokens: integer(value.completionTokens, 'usage.completionTokens', 0),
    reasoningTokens: integer(value.reasoningTokens, 'usage.reasoningTokens', 0),
    ...defined({
      restoredPromptTokens: optionalInteger(value.restoredPromptTokens, 'usage.restoredPromptTokens', 0),
      draftTokens: optionalInteger(value.draftTokens, 'usage.draftTokens', 0),
      acceptedDraftTokens: optionalInteger(value.acceptedDraftTokens, 'usage.acceptedDraftTokens', 0),
    }),
  };
}

/** Durations are read as any finite number: a clock step must not cost a stream or an event. */
function timings(value: Json): Timings {
  return {
    ttftMs: number(value.ttftMs, 'timings.ttftMs'),
    promptMs: number(value.promptMs, 'timings.promptMs'),
    decodeTokensPerSecond: number(value.decodeTokensPerSecond, 'timings.decodeTokensPerSecond'),
    durationMs: number(value.durationMs, 'timings.durationMs'),
    queueMs: number(value.queueMs, 'timings.queueMs'),
  };
}

function hops(value: Json): GatewayHops {
  const ms = (field: keyof GatewayHops): number => number(value[field], `hops.${field}`);
  const placeMs = nullable(value.placeMs, (v) => number(v, 'hops.placeMs'));
  return {
    parseMs: ms('parseMs'),
    decodeMs: ms('decodeMs'),
    ...(placeMs !== null && { placeMs }),
    generateMs: ms('generateMs'),
    firstEventMs: ms('firstEventMs'),
    writeMs: ms('writeMs'),
  };
}

/** Null and absent both read as null (older events left optional fields out). */
function nullable<T>(value: unknown, read: (value: unknown) => T): T | null {
  return value === null || value === undefined ? null : read(value);
}
