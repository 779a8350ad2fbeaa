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
  /** The conversation before this input (from `previous_response_id` or `conversation`). */
  history: ResponsesItem[];
  conversation?: string;
  /** See CanonicalRequest.affinityKey; responses that continue this one inherit it. */
  affinityKey?: string;
}

/** One stored response: enough to show it again, list its input, and continue from it. */
export interface StoredResponse {
  resource: ResponseResource;
  input: ResponsesItem[];
  history: ResponsesItem[];
  conversation?: string;
  /** The conversation's affinity key, inherited by responses that continue this one. */
  affinityKey?: string;
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
