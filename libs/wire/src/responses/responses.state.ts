import {
  array,
  boolean,
  defined,
  number,
  object,
  oneOf,
  optionalBoolean,
  optionalInteger,
  optionalObject,
  optionalString,
  string,
} from '@cortex/contracts';
import type { BackgroundRecord } from './responses.background.js';
import type { ResponseEcho, ResponseResource, ResponseStatus, ResponsesItem } from './responses.types.js';

/** What the translator hands the gateway with a decoded Responses request, and gets back to store. */
export interface ResponsesState {
  responseId: string;
  /** Unix seconds. */
  createdAt: number;
  echo: ResponseEcho;
  store: boolean;
  /** This request's input items: references resolved, each with an id. */
  input: ResponsesItem[];
  /** See StoredResponse.chain. */
  chain: string[];
  conversation?: string;
  /** See StoredResponse.conversationItems. */
  conversationItems?: number;
  /** See CanonicalRequest.affinityKey; responses that continue this one inherit it. */
  affinityKey?: string;
  /** The request included `reasoning.encrypted_content`: reasoning items carry it (when a key is configured). */
  sealReasoning?: boolean;
  /** See `DecodedResponsesRequest.toolNamespaces`. */
  toolNamespaces?: Record<string, string>;
  /**
   * WebSocket turns only: the conversation before this request's input, which the connection keeps
   * (see LocalResponse). Stored as StoredResponse.history when no stored chain leads to it (it
   * continues a `store: false` response of the same connection).
   */
  history?: ResponsesItem[];
}

/**
 * One stored response: enough to show it again, list its input, and continue from it. Each response
 * stores only its own items; the conversation before it is rebuilt from the responses in `chain`, so
 * storage grows with the length of a conversation, not with its square.
 */
export interface StoredResponse {
  resource: ResponseResource;
  input: ResponsesItem[];
  /** The earlier responses of its `previous_response_id` chain, oldest first (ids only). */
  chain?: string[];
  /** The `conversation` it was created in. */
  conversation?: string;
  /** How many of that conversation's items came before this response (the first of a chain only). */
  conversationItems?: number;
  /** The conversation's affinity key, inherited by responses that continue this one. */
  affinityKey?: string;
  /** A background response: what renders its stored run events again (see `BackgroundReplay`). */
  background?: BackgroundRecord;
  /** Written by earlier versions instead of `chain`: the whole conversation before this response. */
  history?: ResponsesItem[];
}

/**
 * Readers for the Responses shapes that cross the bus (`translator.decode`'s state, `responses.store`).
 * They live here, beside their types, because those types are the Responses items and resource: moving
 * them to @cortex/contracts would move the whole dialect. Each throws `invalid_request` naming the
 * field; a caller reading another service's reply reports that as the service's fault (`internal`).
 * Items are checked as objects with a string `type`, the echo as an object: both are the dialect's
 * own shapes, rendered back as they came.
 */
export function decodeResponsesState(value: unknown, at = 'state'): ResponsesState {
  const state = object(value, at);
  return defined({
    responseId: string(state.responseId, `${at}.responseId`),
    createdAt: number(state.createdAt, `${at}.createdAt`),
    echo: object(state.echo, `${at}.echo`) as unknown as ResponseEcho,
    store: boolean(state.store, `${at}.store`),
    input: decodeResponsesItems(state.input, `${at}.input`),
    chain: array(state.chain, `${at}.chain`).map((id, i) => string(id, `${at}.chain[${i}]`)),
    conversation: optionalString(state.conversation, `${at}.conversation`),
    conversationItems: optionalInteger(state.conversationItems, `${at}.conversationItems`, 0),
    affinityKey: optionalString(state.affinityKey, `${at}.affinityKey`),
    sealReasoning: optionalBoolean(state.sealReasoning, `${at}.sealReasoning`),
    toolNamespaces: stringRecord(state.toolNamespaces, `${at}.toolNamespaces`),
    history:
      state.history === undefined || state.history === null
        ? undefined
        : decodeResponsesItems(state.history, `${at}.history`),
  });
}

const STATUSES: readonly ResponseStatus[] = ['queued', 'in_progress', 'completed', 'incomplete', 'failed', 'cancelled'];

/** A response resource: its own fields are checked; the request's echo it carries is rendered back as it came. */
export function decodeResponseResource(value: unknown, at = 'resource'): ResponseResource {
  const resource = object(value, at);
  string(resource.id, `${at}.id`);
  oneOf(resource.object, `${at}.object`, ['response'] as const);
  number(resource.created_at, `${at}.created_at`);
  if (resource.completed_at !== null) number(resource.completed_at, `${at}.completed_at`);
  oneOf(resource.status, `${at}.status`, STATUSES);
  if (resource.incomplete_details !== null)
    string(object(resource.incomplete_details, `${at}.incomplete_details`).reason, `${at}.incomplete_details.reason`);
  decodeResponsesItems(resource.output, `${at}.output`);
  if (resource.error !== null) {
    const error = object(resource.error, `${at}.error`);
    string(error.code, `${at}.error.code`);
    string(error.message, `${at}.error.message`);
  }
  if (resource.usage !== null) object(resource.usage, `${at}.usage`);
  return resource as unknown as ResponseResource;
}

/** `responses.store`: the state the translator handed out with the decoded request, and the finished resource. */
export function decodeStoreCommand(value: unknown): { state: ResponsesState; resource: ResponseResource } {
  const command = object(value, 'payload');
  return { state: decodeResponsesState(command.state), resource: decodeResponseResource(command.resource) };
}

/** Items as they cross the bus: objects with a string `type`. */
export function decodeResponsesItems(value: unknown, at: string): ResponsesItem[] {
  return array(value, at).map((entry, i) => {
    const item = object(entry, `${at}[${i}]`);
    string(item.type, `${at}[${i}].type`);
    return item as unknown as ResponsesItem;
  });
}

function stringRecord(value: unknown, at: string): Record<string, string> | undefined {
  const record = optionalObject(value, at);
  if (record) for (const [key, entry] of Object.entries(record)) string(entry, `${at}.${key}`);
  return record as Record<string, string> | undefined;
}

/** Input item ids name their response like output item ids do: `in_<response hex>_<index>`. */
export function inputItemId(responseId: string, index: number): string {
  return `in_${responseId.replace(/^resp_/, '')}_${index}`;
}

/** The response an item id (input or output) belongs to, or undefined for ids cortex did not make. */
export function responseIdOfAnyItem(itemId: string): string | undefined {
  const match = /^(?:in|msg|fc|rs)_([A-Za-z0-9]+)_\d+$/.exec(itemId);
  return match ? `resp_${match[1]}` : undefined;
}
