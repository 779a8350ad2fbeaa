import type { BackgroundRecord } from './responses.background.js';
import type { ResponseEcho, ResponseResource, ResponsesItem } from './responses.types.js';

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

/** Input item ids name their response like output item ids do: `in_<response hex>_<index>`. */
export function inputItemId(responseId: string, index: number): string {
  return `in_${responseId.replace(/^resp_/, '')}_${index}`;
}

/** The response an item id (input or output) belongs to, or undefined for ids cortex did not make. */
export function responseIdOfAnyItem(itemId: string): string | undefined {
  const match = /^(?:in|msg|fc|rs)_([A-Za-z0-9]+)_\d+$/.exec(itemId);
  return match ? `resp_${match[1]}` : undefined;
}
