import { randomBytes } from 'node:crypto';
import { CortexError, isObject, type CanonicalRequest } from '@cortex/contracts';
import { affinityKey } from '../affinity.js';
import { ToolCallLedger } from '../tool-results.js';
import { CompactionSeal } from './responses.compaction.js';
import type { DecodedResponsesRequest } from './responses.decoder.js';
import { conversationMessages, resolveItemReferences } from './responses.items.js';
import { ReasoningSeal } from './reasoning-seal.js';
import { inputItemId, type ResponsesState } from './responses.state.js';
import type { ResponsesCompactionItem, ResponsesItem } from './responses.types.js';

/** What a body continues, gathered from storage (empty for a body that continues nothing). */
export interface ResponsesContext {
  /** The conversation before this body's input (a chain, a conversation, or a WebSocket's latest response). */
  history: ResponsesItem[];
  /** See StoredResponse.chain. */
  chain: string[];
  conversationItems?: number;
  /** The affinity key the conversation runs under, when it has one already. */
  affinity?: string;
  /** The items that the body's `item_reference`s name, by id. */
  referenced: ReadonlyMap<string, ResponsesItem>;
}

/** A decoded Responses body: the canonical request, the state its response is rendered and stored with, and the tools dropped. */
export interface AssembledResponses {
  request: CanonicalRequest;
  state: ResponsesState;
  droppedTools: string[];
}

/** A new response's id. */
export function newResponseId(): string {
  return `resp_${randomBytes(16).toString('hex')}`;
}

/**
 * Whether a decoded body continues stored state (`previous_response_id`, a conversation, item
 * references): then only the translator, which holds the store, can gather its context. A body that
 * continues nothing is assembled wherever it arrives, with an empty context.
 */
export function continuesStoredState(decoded: DecodedResponsesRequest): boolean {
  return (
    decoded.previousResponseId !== undefined || decoded.conversation !== undefined || decoded.itemReferences.length > 0
  );
}

/**
 * Whether a Responses body names stored state at its top level (`previous_response_id`,
 * `conversation`), read off the raw body: such a body goes to the translator without being decoded
 * here first. An item reference, which only decoding finds, is caught by `continuesStoredState`.
 */
export function namesStoredState(body: unknown): boolean {
  return isObject(body) && (body.previous_response_id != null || body.conversation != null);
}

/**
 * Turns a decoded Responses body and its gathered context into the canonical request and the response's
 * state: input items resolved, given ids and unsealed (reasoning and compaction summaries sealed by this
 * deployment's `responses.reasoning_key`), tool results checked against the calls before them. The same
 * in the translator (any body) and the gateway (a body that continues nothing).
 */
export class ResponsesAssembly {
  /** Seals reasoning (`responses.reasoning_key`); undefined without a key. */
  readonly seal: ReasoningSeal | undefined;
  /** Seals compaction summaries with the same key. */
  readonly compactionSeal: CompactionSeal;

  constructor(reasoningKey: string | undefined) {
    this.seal = reasoningKey ? new ReasoningSeal(reasoningKey) : undefined;
    this.compactionSeal = new CompactionSeal(reasoningKey);
  }

  /** `socket`: the turn came on a WebSocket (its response may be continued on it, stored or not). */
  assemble(
    decoded: DecodedResponsesRequest,
    responseId: string,
    context: ResponsesContext,
    socket = false,
  ): AssembledResponses {
    const { history, chain, conversationItems } = context;
    // An unstored response cannot be continued (except on its WebSocket), so it starts no chain worth remembering.
    const affinity = context.affinity ?? (decoded.store || socket ? affinityKey.response(responseId) : undefined);
    const input = this.input(decoded, responseId, context.referenced);
    checkToolResults(history, input);
    const messages = conversationMessages(decoded.instructions, [...history, ...input], history.length);
    if (messages.length === 0)
      throw new CortexError('invalid_request', 'input: there is nothing to respond to', { param: 'input' });
    const state: ResponsesState = {
      responseId,
      createdAt: Math.floor(Date.now() / 1000),
      echo: decoded.echo,
      store: decoded.store,
      input,
      chain,
      ...(decoded.conversation !== undefined && { conversation: decoded.conversation, conversationItems }),
      affinityKey: affinity,
      sealReasoning: decoded.encryptedReasoning,
      ...(Object.keys(decoded.toolNamespaces).length > 0 && { toolNamespaces: decoded.toolNamespaces }),
      ...(socket && { history }),
    };
    return {
      request: { ...decoded.request, messages, affinityKey: affinity },
      state,
      droppedTools: decoded.droppedTools,
    };
  }

  /** This body's input items: references resolved, ids given, sealed content opened. */
  input(
    decoded: DecodedResponsesRequest,
    responseId: string,
    referenced: ReadonlyMap<string, ResponsesItem>,
  ): ResponsesItem[] {
    return resolveItemReferences(decoded.input, referenced).map((item, i) =>
      this.unseal(
        item.id === undefined ? ({ ...item, id: inputItemId(responseId, i) } as ResponsesItem) : item,
        `input[${i}]`,
      ),
    );
  }

  /**
   * A reasoning item a stateless client sends back with only `encrypted_content` (Codex drops the raw
   * text) gets its text again when this deployment sealed it; other providers' blobs stay opaque.
   */
  private unseal(item: ResponsesItem, param: string): ResponsesItem {
    if (item.type === 'compaction') return this.openCompaction(item, param);
    if (item.type !== 'reasoning' || item.content?.length || item.encrypted_content === undefined || !this.seal)
      return item;
    const text = this.seal.open(item.encrypted_content);
    return text === undefined ? item : { ...item, content: [{ type: 'reasoning_text', text }] };
  }

  /**
   * A compaction item sealed by this deployment gets its summary again; one made elsewhere (another
   * provider, another `reasoning_key`) cannot be read, and dropping it would silently lose the conversation.
   */
  private openCompaction(item: ResponsesCompactionItem, param: string): ResponsesItem {
    if (item.summary !== undefined) return item;
    const summary = this.compactionSeal.open(item.encrypted_content);
    if (summary === undefined) {
      throw new CortexError(
        'invalid_request',
        `${param}.encrypted_content: this compaction item was not made by this ` +
          'server (or its responses.reasoning_key changed), so it cannot be ' +
          'read; compact the conversation here with POST /v1/responses/compact',
        { param: `${param}.encrypted_content` },
      );
    }
    return { ...item, summary };
  }
}

/**
 * Each `function_call_output` of the input answers a `function_call` made before it: in the conversation
 * continued (chain, conversation or the WebSocket's latest response) or earlier in the input.
 */
function checkToolResults(history: readonly ResponsesItem[], input: readonly ResponsesItem[]): void {
  const ledger = new ToolCallLedger();
  for (const item of history) if (item.type === 'function_call') ledger.called(item.call_id);
  input.forEach((item, i) => {
    if (item.type === 'function_call') ledger.called(item.call_id);
    if (item.type === 'function_call_output') ledger.answered(item.call_id, `input[${i}].call_id`);
  });
}
