// The Responses API over a WebSocket (spec: "WebSocket Transport"): the client's `response.create`
// message, the error envelope, and the response a connection keeps in memory to continue from.
import {
  array,
  CortexError,
  fail,
  object,
  optionalBoolean,
  optionalString,
  string,
  type ErrorBody,
  type Json,
} from '@cortex/contracts';
import { responsesErrorPayload } from './responses.resource.js';
import type { ResponsesErrorPayload, ResponsesItem } from './responses.types.js';

/**
 * The latest response of one WebSocket connection, held in that gateway's memory: the whole
 * conversation through its output, so the next turn continues it without the store, and a
 * `store: false` response can be continued on the same connection at all.
 */
export interface LocalResponse {
  id: string;
  /** The conversation before it, its input and its output, in order. */
  items: ResponsesItem[];
  /** Its stored `previous_response_id` chain (see StoredResponse.chain) when it was stored; absent when it was not. */
  chain?: string[];
  affinityKey?: string;
}

/** What the gateway adds to a decode request for a WebSocket turn. */
export interface SocketTurn {
  /** The connection's latest response, sent when the turn's `previous_response_id` names it. */
  previous?: LocalResponse;
}

/** Checks a decode request's `socket` field (gateway → translator). */
export function decodeSocketTurn(value: unknown, param = 'socket'): SocketTurn {
  const turn = object(value, param);
  if (turn.previous === undefined) return {};
  const previous = object(turn.previous, `${param}.previous`);
  const local: LocalResponse = {
    id: string(previous.id, `${param}.previous.id`),
    items: array(previous.items, `${param}.previous.items`).map((item, i) => {
      string(object(item, `${param}.previous.items[${i}]`).type, `${param}.previous.items[${i}].type`);
      return item as ResponsesItem;
    }),
  };
  if (previous.chain !== undefined)
    local.chain = array(previous.chain, `${param}.previous.chain`).map((id, i) =>
      string(id, `${param}.previous.chain[${i}]`),
    );
  const affinity = optionalString(previous.affinityKey, `${param}.previous.affinityKey`);
  if (affinity !== undefined) local.affinityKey = affinity;
  return { previous: local };
}

/** One client message on a Responses WebSocket. */
export type SocketMessage =
  /**
   * A turn: the create body (`type` removed, `stream: true`). `generate: false` is a warm-up (OpenAI's
   * WebSocket mode; Codex sends one when it connects): the request is checked and kept to continue from,
   * and nothing is generated.
   */
  | { type: 'response.create'; body: Json; generate: boolean }
  /** The client read a response to its end (Codex may say so after each turn): nothing to answer. */
  | { type: 'response.processed' };

/**
 * One client message → what it asks for. Codex sends `stream: true` and `stream_options` as on HTTP, so
 * those are accepted; what cannot hold on a socket is refused naming the field.
 */
export function decodeSocketMessage(text: string): SocketMessage {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new CortexError(
      'invalid_request',
      'the message is not JSON: send one JSON object per message, {"type": "response.create", …}',
    );
  }
  const { type, ...body } = object(parsed, 'message');
  if (type === 'response.processed') return { type };
  if (type !== 'response.create')
    fail('type', `${JSON.stringify(type ?? null)} is not a client event here: send "response.create"`);
  if (optionalBoolean(body.background, 'background')) {
    fail(
      'background',
      'background responses cannot run on a WebSocket: omit it here, or create it with POST /v1/responses',
    );
  }
  if (optionalBoolean(body.stream, 'stream') === false) fail('stream', 'a WebSocket turn always streams: omit stream');
  const generate = optionalBoolean(body.generate, 'generate') !== false;
  const { background: _background, generate: _generate, ...create } = body;
  return { type, body: { ...create, stream: true }, generate };
}

/** The spec's WebSocket error envelope. */
export interface SocketErrorEvent {
  type: 'error';
  status: number;
  error: ResponsesErrorPayload;
}

export function socketErrorEvent(error: ErrorBody, status: number): SocketErrorEvent {
  return { type: 'error', status, error: responsesErrorPayload(error) };
}
