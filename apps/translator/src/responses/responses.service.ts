import { randomBytes } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import { CONFIG, type CortexConfig } from '@cortex/config';
import { CortexError, type CanonicalRequest, type DecodedRequest } from '@cortex/contracts';
import {
  affinityKey,
  COMPACTION_MAX_TOKENS,
  COMPACTION_PROMPT,
  compactCreateBody,
  CompactionSeal,
  splitForCompaction,
  type DecodedResponsesRequest,
  type ResponsesCompactionItem,
  conversationMessages,
  decodeResponsesRequest,
  inputItemId,
  isTerminalStatus,
  ReasoningSeal,
  resolveItemReferences,
  responseIdOfAnyItem,
  type DecodeOptions,
  type ResponseResource,
  type ResponsesItem,
  type ResponsesState,
  type SocketTurn,
  withoutSummary,
  type StoredResponse,
  ToolCallLedger,
} from '@cortex/wire';
import { ResponsesStore } from './responses.store.js';

/** Responses API state: history for `previous_response_id` and `conversation`, storage, listing. */
@Injectable()
export class ResponsesService {
  /** Seals reasoning and compaction summaries (`responses.reasoning_key`); undefined without a key. */
  readonly seal: ReasoningSeal | undefined;
  private readonly compactionSeal: CompactionSeal;

  constructor(
    private readonly store: ResponsesStore,
    @Inject(CONFIG) config: CortexConfig,
  ) {
    this.seal = config.responses.reasoningKey ? new ReasoningSeal(config.responses.reasoningKey) : undefined;
    this.compactionSeal = new CompactionSeal(config.responses.reasoningKey);
  }

  /**
   * Decodes a body and rebuilds the conversation it continues; `session` is a session header's affinity
   * key. A WebSocket turn (`socket`) continues its connection's latest response from memory when it
   * names it, and gets the conversation before its input back in the state.
   */
  async decode(body: unknown, session?: string, options: DecodeOptions = {}, socket?: SocketTurn): Promise<DecodedRequest & { droppedTools: string[] }> {
    const decoded = decodeResponsesRequest(body, options);
    const responseId = `resp_${randomBytes(16).toString('hex')}`;
    const { history, input, chain, conversationItems, affinity } = await this.gather(decoded, responseId, session, socket);
    checkToolResults(history, input);
    const messages = conversationMessages(decoded.instructions, [...history, ...input]);
    if (messages.length === 0) throw new CortexError('invalid_request', 'input: there is nothing to respond to', { param: 'input' });
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
    return { request: { ...decoded.request, messages, affinityKey: affinity }, state, droppedTools: decoded.droppedTools };
  }

  /**
   * `POST /v1/responses/compact`: the conversation (the previous response's chain, then `input`) split
   * into the older items the model summarises and the latest ones kept verbatim, with the request that
   * asks the model for the summary (`COMPACTION_PROMPT` after the older items).
   */
  async compaction(body: unknown, session?: string): Promise<CompactionPlan> {
    const decoded = decodeResponsesRequest(compactCreateBody(body));
    const { history, input, affinity } = await this.gather(decoded, `resp_${randomBytes(16).toString('hex')}`, session);
    const { older, recent } = splitForCompaction([...history, ...input]);
    if (recent.length === 0 && older.length === 0) throw new CortexError('invalid_request', 'input: there is nothing to compact', { param: 'input' });
    if (older.length === 0) return { request: null, recent };
    const messages = [...conversationMessages(decoded.instructions, older), { role: 'user' as const, content: COMPACTION_PROMPT }];
    const request = { model: decoded.request.model, messages, sampling: { maxTokens: COMPACTION_MAX_TOKENS }, stream: true, ...(affinity && { affinityKey: affinity }) };
    return { request, recent };
  }

  /** The items a body continues (its chain or conversation) and its own input, references resolved, ids given, sealed content opened. */
  private async gather(decoded: DecodedResponsesRequest, responseId: string, session: string | undefined, socket?: SocketTurn) {
    const local = socket?.previous?.id === decoded.previousResponseId ? socket?.previous : undefined;
    let history: ResponsesItem[] = [];
    let chain: string[] = [];
    let conversationItems: number | undefined;
    let fetched: StoredResponse[] = [];
    // The conversation's worker affinity: a session header, else the client's cache key, else the
    // conversation, else the chain's first response (each response stores the key it ran under, and
    // follow-ups inherit it).
    let affinity = session ?? decoded.request.affinityKey;
    if (local) {
      history = local.items;
      // An unstored response has no stored chain: the history is stored with this one instead (see save).
      chain = local.chain ? [...local.chain, local.id] : [];
      affinity ??= local.affinityKey ?? affinityKey.response(local.id);
    } else if (decoded.previousResponseId) {
      const previous = await this.store.get(decoded.previousResponseId);
      if (!previous) {
        throw new CortexError('previous_response_not_found', `Previous response with id '${decoded.previousResponseId}' not found.`, {
          param: 'previous_response_id',
        });
      }
      chain = [...(previous.chain ?? []), previous.resource.id];
      fetched = await this.chainThrough(previous);
      history = await this.historyOf(fetched);
      affinity ??= previous.affinityKey ?? affinityKey.response(previous.resource.id);
    } else if (decoded.conversation) {
      history = await this.store.conversation(decoded.conversation);
      conversationItems = history.length;
      affinity ??= affinityKey.conversation(decoded.conversation);
    }
    // An unstored response cannot be continued (except on its WebSocket), so it starts no chain worth remembering.
    if (decoded.store || socket) affinity ??= affinityKey.response(responseId);
    const referenced = await this.referencedItems(decoded.itemReferences, fetched);
    const input = resolveItemReferences(decoded.input, referenced).map((item, i) =>
      this.unseal(item.id === undefined ? ({ ...item, id: inputItemId(responseId, i) } as ResponsesItem) : item, `input[${i}]`),
    );
    return { history, input, chain, conversationItems, affinity };
  }

  /**
   * A reasoning item a stateless client sends back with only `encrypted_content` (Codex drops the raw
   * text) gets its text again when this deployment sealed it; other providers' blobs stay opaque.
   */
  private unseal(item: ResponsesItem, param: string): ResponsesItem {
    if (item.type === 'compaction') return this.openCompaction(item, param);
    if (item.type !== 'reasoning' || item.content?.length || item.encrypted_content === undefined || !this.seal) return item;
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
      throw new CortexError('invalid_request', `${param}.encrypted_content: this compaction item was not made by this server (or its responses.reasoning_key changed), so it cannot be read; compact the conversation here with POST /v1/responses/compact`, { param: `${param}.encrypted_content` });
    }
    return { ...item, summary };
  }

  /** Stores a response (with `revision`, only over that stored revision: a replica that lost the race appends nothing). */
  async save(state: ResponsesState, resource: ResponseResource, revision?: number): Promise<void> {
    if (!state.store) return;
    const stored: StoredResponse = {
      resource,
      input: state.input,
      ...(state.chain.length > 0 && { chain: state.chain }),
      ...(state.conversation && { conversation: state.conversation, conversationItems: state.conversationItems }),
      ...(state.affinityKey && { affinityKey: state.affinityKey }),
      ...(state.echo.background && { background: { echo: state.echo, sealReasoning: state.sealReasoning, ...(state.toolNamespaces && { toolNamespaces: state.toolNamespaces }) } }),
      // A WebSocket turn that continues an unstored response: no chain leads here, so keep what came before.
      ...(state.chain.length === 0 && !state.conversation && state.history?.length && { history: state.history }),
    };
    if (!(await this.store.put(stored, revision))) return;
    // A background response joins its conversation once, when it has finished.
    if (state.conversation && isTerminalStatus(resource.status)) await this.store.appendToConversation(state.conversation, [...state.input, ...resource.output]);
  }

  async delete(id: string): Promise<{ id: string; object: 'response'; deleted: true }> {
    if (!(await this.store.delete(id))) throw notFound(id);
    return { id, object: 'response', deleted: true };
  }

  /** This response's input items, newest first by default, paginated by item id. */
  async inputItems(id: string, options: { after?: string; limit?: number; order?: 'asc' | 'desc' }): Promise<Record<string, unknown>> {
    const stored = await this.required(id);
    const limit = options.limit ?? 20;
    if (!Number.isInteger(limit) || limit < 1 || limit > 100) throw new CortexError('invalid_request', 'limit: must be an integer from 1 to 100', { param: 'limit' });
    const ordered = options.order === 'asc' ? [...stored.input] : [...stored.input].reverse();
    let start = 0;
    if (options.after) {
      const at = ordered.findIndex((item) => item.id === options.after);
      if (at === -1) throw new CortexError('invalid_request', `after: no input item '${options.after}' in ${id}`, { param: 'after' });
      start = at + 1;
    }
    const data = ordered.slice(start, start + limit).map(withoutSummary);
    return { object: 'list', data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: start + limit < ordered.length };
  }

  /**
   * Every response of the chain up to and including `last`, oldest first, fetched together. One that
   * has expired or was deleted breaks the chain, which is said rather than answered from a silently
   * shortened history.
   */
  private async chainThrough(last: StoredResponse): Promise<StoredResponse[]> {
    const ids = last.chain ?? [];
    const earlier = await Promise.all(ids.map((id) => this.store.get(id)));
    const links: StoredResponse[] = [];
    for (const [i, stored] of earlier.entries()) {
      if (!stored) {
        throw new CortexError(
          'previous_response_not_found',
          `Response '${ids[i]}', an earlier turn of '${last.resource.id}', is no longer stored (expired or deleted), so the conversation cannot be rebuilt; start a new one or send the history as input.`,
          { param: 'previous_response_id' },
        );
      }
      links.push(stored);
    }
    links.push(last);
    return links;
  }

  /** The whole conversation of a chain: the conversation items it started after, then each response's input and output. */
  private async historyOf(links: readonly StoredResponse[]): Promise<ResponsesItem[]> {
    const first = links[0] as StoredResponse;
    const history: ResponsesItem[] = first.history
      ? [...first.history]
      : first.conversation && first.conversationItems
        ? (await this.store.conversation(first.conversation)).slice(0, first.conversationItems)
        : [];
    for (const link of links) history.push(...link.input, ...link.resource.output);
    return history;
  }

  private async required(id: string): Promise<StoredResponse> {
    const stored = await this.store.get(id);
    if (!stored) throw notFound(id);
    return stored;
  }

  /** The items that references name, by id, from the responses that hold them: those `fetched` already, the rest read together. */
  private async referencedItems(ids: readonly string[], fetched: readonly StoredResponse[]): Promise<Map<string, ResponsesItem>> {
    const known = new Map(fetched.map((stored) => [stored.resource.id, stored]));
    const responseIds = [...new Set(ids.map(responseIdOfAnyItem).filter((id): id is string => id !== undefined))];
    const holders = await Promise.all(responseIds.map((id) => known.get(id) ?? this.store.get(id)));
    const found = new Map<string, ResponsesItem>();
    for (const stored of holders) {
      for (const item of [...(stored?.input ?? []), ...(stored?.resource.output ?? [])]) if (item.id) found.set(item.id, item as ResponsesItem);
    }
    return found;
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

/** What `compaction` hands the gateway: the summarisation request (null when nothing is older than the latest user turn) and the items kept. */
export interface CompactionPlan {
  request: CanonicalRequest | null;
  recent: ResponsesItem[];
}

export function notFound(id: string): CortexError {
  return new CortexError('not_found', `Response with id '${id}' not found.`, { param: 'response_id' });
}
