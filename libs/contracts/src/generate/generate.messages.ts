import { IsOptional, IsString } from 'class-validator';
import {
  array,
  boolean,
  integer,
  maxLength,
  object,
  oneOf,
  optionalObject,
  optionalString,
  string,
} from '../fields.js';
import { decodeCanonicalRequest, type CanonicalRequest } from './canonical-request.js';
import type { ErrorBody } from '../errors/error-codes.js';
import { decodeRequestPriority, type RequestPriority } from './priority.js';

export const DIALECTS = ['openai.chat', 'openai.responses', 'anthropic.messages', 'openai.completions'] as const;
export type Dialect = (typeof DIALECTS)[number];

/** gateway → translator: decode one HTTP body of a dialect into the canonical request. */
export interface DecodeRequest {
  dialect: Dialect;
  body: Record<string, unknown>;
  /**
   * The affinity key of a session header (`gateway.session_headers`): it names the conversation
   * before anything in the body does, and a stored response keeps the key its turn ran under. At
   * most 512 characters.
   */
  session?: string;
  /**
   * A Responses turn on a WebSocket: `{ previous? }`, the connection's latest response when the turn
   * continues it (checked by the translator, see @cortex/wire SocketTurn).
   */
  socket?: Record<string, unknown>;
}

/** Checks a `decode` request. By hand, like `generate`: it is on every request's path. */
export function decodeDecodeRequest(value: unknown): DecodeRequest {
  const request = object(value, 'decode');
  oneOf(request.dialect, 'dialect', DIALECTS);
  object(request.body, 'body');
  maxLength(optionalString(request.session, 'session'), 512, 'session');
  optionalObject(request.socket, 'socket');
  return request as unknown as DecodeRequest;
}

/** translator → gateway: the canonical request, plus what the dialect needs to render and store the reply. */
export interface DecodedRequest {
  request: CanonicalRequest;
  /**
   * Dialect-specific state, passed on unread by the gateway's request path and read where the dialect
   * uses it: the Responses API's (its id, echo, input and chain) by `decodeResponsesState` in @cortex/wire.
   */
  state?: unknown;
}

/** gateway → worker: run this request and publish its events on `streamSubject`. */
export interface GenerateCommand {
  /** The gateway's run id: one per placement of a request, the key of its stream and of cancels. */
  runId: string;
  streamSubject: string;
  request: CanonicalRequest;
  /** A background response: runs to the end with no gateway watching (only `cancel` stops it). */
  background?: boolean;
  /** Tier and account for the worker's queue; absent (an older gateway): the lowest tier. */
  priority?: RequestPriority;
  /** A stream migrated from a worker that was lost: go on after the output already delivered. */
  resume?: Resume;
}

/**
 * Where a migrated stream goes on: the token ids behind the output the client already has (see the
 * `tokens` of stream events), evaluated after the prompt and replayed through the decode state, and
 * the ids of the tool calls already announced, by index, so a call in progress keeps its id.
 */
export interface Resume {
  tokens: number[];
  toolCallIds: string[];
}

/** Checks a `generate` command's `resume`: token ids are non-negative integers (the worker checks them against its vocabulary). */
function checkResume(value: unknown): void {
  const resume = object(value, 'resume');
  array(resume.tokens, 'resume.tokens').forEach((token, i) => integer(token, `resume.tokens[${i}]`, 0));
  array(resume.toolCallIds, 'resume.toolCallIds').forEach((id, i) => string(id, `resume.toolCallIds[${i}]`));
}

/** Checks a `generate` command from the bus (the worker's hot path: see decodeCanonicalRequest). */
export function decodeGenerateCommand(value: unknown): GenerateCommand {
  const command = object(value, 'generate');
  string(command.runId, 'runId');
  string(command.streamSubject, 'streamSubject');
  if (command.background !== undefined) boolean(command.background, 'background');
  if (command.priority !== undefined) decodeRequestPriority(command.priority, 'priority');
  if (command.resume !== undefined) checkResume(command.resume);
  decodeCanonicalRequest(command.request, 'request');
  return command as unknown as GenerateCommand;
}

export interface GenerateAccepted {
  runId: string;
  workerId: string;
  /**
   * How many requests were ahead of this one when it was admitted, first come first served. With
   * the fair queue (`worker.queue_order: fair`) the order differs: a later request of a higher tier
   * or of another account may be admitted before it, and an earlier one of a lower tier after it.
   */
  queuePosition: number;
}

/** gateway → worker: count the prompt tokens of a request with the model's real tokenizer and template. */
export interface TokenizeCommand {
  request: CanonicalRequest;
}

export function decodeTokenizeCommand(value: unknown): TokenizeCommand {
  return { request: decodeCanonicalRequest(object(value, 'tokenize').request, 'request') };
}

export interface TokenCount {
  model: string;
  inputTokens: number;
}

export class CancelCommand {
  @IsString() runId!: string;
  @IsOptional() @IsString() reason?: string;
}

export type FinishReason = 'stop' | 'length' | 'tool_calls' | 'cancelled' | 'error';

export interface Usage {
  promptTokens: number;
  cachedPromptTokens: number;
  /**
   * Of `cachedPromptTokens`, those restored from the worker's prompt cache beyond its slots (the
   * conversation's sequence had been taken by another); the rest its sequence still held. Absent: none.
   */
  restoredPromptTokens?: number;
  completionTokens: number;
  reasoningTokens: number;
  /**
   * Speculative decoding (a model with a `draft`): tokens the draft model (or input lookup) proposed,
   * and how many of them the model accepted. Absent for models without a draft.
   */
  draftTokens?: number;
  acceptedDraftTokens?: number;
}

/** Usage of a request that used no tokens yet (or none at all). */
export const NO_USAGE: Readonly<Usage> = Object.freeze({
  promptTokens: 0,
  cachedPromptTokens: 0,
  completionTokens: 0,
  reasoningTokens: 0,
});

export interface Timings {
  /** From `generate` arriving at the worker to the first token event. */
  ttftMs: number;
  /**
   * Prompt evaluation: from starting to evaluate the prompt tokens the sequence did not already hold
   * to the first token. `ttftMs - promptMs` is the worker's own overhead (validation, rendering, slot).
   */
  promptMs: number;
  /** Decode rate after the first token. */
  decodeTokensPerSecond: number;
  durationMs: number;
  queueMs: number;
}

/**
 * Canonical events a worker publishes on a request's stream subject. `seq` starts at 0 and grows by
 * one per event; a gap means lost messages and is treated as an error by the consumer. A text or
 * reasoning delta that merges several decoded pieces (about one per token, see StreamPublisher) says
 * how many in `pieces`; absent means one. `tokens` on an output event are the ids of the tokens
 * generated since the last event that carried some, whose output is now all sent (see Resume): an
 * event that ends a token's output carries it, so a stream's tokens so far rebuild its state exactly.
 */
/**
 * One generated token's log-probability (natural log) in the distribution it was sampled from, with
 * the likeliest tokens of that step (`top`, as many as the request asked for). `bytes`: the token's
 * UTF-8 bytes (a token may hold part of a character). An echoed prompt's first token has none (null).
 */
export interface TokenLogprob {
  token: string;
  logprob: number | null;
  bytes: number[];
  top: Array<{ token: string; logprob: number; bytes: number[] }>;
}

export type StreamEvent =
  /** `reasoningMarkers`: how the model marks its reasoning, for clients that ask for it inline (x-include-thinking). */
  /** `cachedPromptTokens`: of the prompt, the tokens its sequence held or restored (absent: none, or a worker before it). */
  | {
      seq: number;
      type: 'start';
      runId: string;
      workerId: string;
      model: string;
      promptTokens: number;
      cachedPromptTokens?: number;
      reasoningMarkers?: [string, string];
    }
  /** `logprobs`: for a request that asked (CanonicalRequest.logprobs), those of the tokens whose output this is. */
  | { seq: number; type: 'text'; text: string; pieces?: number; tokens?: number[]; logprobs?: TokenLogprob[] }
  | { seq: number; type: 'reasoning'; text: string; pieces?: number; tokens?: number[] }
  | { seq: number; type: 'tool_call'; index: number; id: string; name: string; tokens?: number[] }
  | { seq: number; type: 'tool_args'; index: number; delta: string; tokens?: number[] }
  /**
   * `moving`: published by the placing gateway on a background run's subject while it moves the run from
   * a lost worker; what that run's worker still sends after it (a frozen worker that wakes) is not part
   * of the response (see BackgroundReplay).
   */
  | { seq: number; type: 'keepalive'; moving?: boolean }
  | { seq: number; type: 'finish'; reason: FinishReason; usage: Usage; timings: Timings; stopSequence?: string }
  /** `moving`: published by the placing gateway to end a background run's move that failed or was cancelled (see BackgroundReplay). */
  | { seq: number; type: 'error'; error: ErrorBody; moving?: boolean }
  | McpListToolsEvent
  | McpCallEvent
  | McpApprovalRequestEvent;

/** A tool a remote MCP server offers, as its `tools/list` describes it. */
export interface McpToolListing {
  name: string;
  description?: string;
  inputSchema: Record<string, unknown>;
  annotations?: Record<string, unknown>;
}

/**
 * The gateway listed an MCP server's tools for a request (`mcp_list_tools`): never a worker's event,
 * the gateway runs MCP tools itself (see McpLoopRun). `error`: the listing failed, and the model was
 * not offered the server's tools.
 */
export interface McpListToolsEvent {
  seq: number;
  type: 'mcp_list_tools';
  id: string;
  serverLabel: string;
  tools: McpToolListing[];
  error?: string;
}

/**
 * A call the model made to an MCP tool that needs the client's approval first: the response ends
 * with it, and the call runs when a later request approves it (`mcp_approval_response`).
 */
export interface McpApprovalRequestEvent {
  seq: number;
  type: 'mcp_approval_request';
  id: string;
  serverLabel: string;
  name: string;
  arguments: string;
}

/**
 * A call the model made to an MCP server's tool, which the gateway runs (`mcp_call`): `begun` with its
 * arguments as the model wrote them, then `ended` with the tool's output or the error that ended it.
 */
export interface McpCallEvent {
  seq: number;
  type: 'mcp_call';
  phase: 'begun' | 'ended';
  id: string;
  serverLabel: string;
  name: string;
  arguments: string;
  output?: string;
  error?: string;
  /** The approval request it answers, for a call the client approved. */
  approvalRequestId?: string;
}

/** Events without their sequence number, as a producer emits them before numbering. */
export type StreamEventBody = StreamEvent extends infer E
  ? E extends { seq: number }
    ? Omit<E, 'seq'>
    : never
  : never;
