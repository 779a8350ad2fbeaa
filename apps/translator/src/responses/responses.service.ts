import { Inject, Injectable } from '@nestjs/common';
import { CONFIG, type CortexConfig } from '@cortex/config';
import { CortexError, type CanonicalRequest } from '@cortex/contracts';
import {
  affinityKey,
  COMPACTION_MAX_TOKENS,
  COMPACTION_PROMPT,
  compactCreateBody,
  splitForCompaction,
  type AssembledResponses,
  type DecodedResponsesRequest,
  conversationMessages,
  decodeResponsesRequest,
  isTerminalStatus,
  newResponseId,
  ReasoningSeal,
  ResponsesAssembly,
  responseIdOfAnyItem,
  type DecodeOptions,
  type ResponseResource,
  type ResponsesContext,
  type ResponsesItem,
  type ResponsesState,
  type SocketTurn,
  withoutSummary,
  type StoredResponse,
} from '@cortex/wire';
import { ResponsesStore } from './responses.store.js';

/** Responses API state: history for `previous_response_id` and `conversation`, storage, listing. */
@Injectable()
export class ResponsesService {
  /** Decoded bodies and their context → request and state (input unsealed with `responses.reasoning_key`). */
  private readonly assembly: ResponsesAssembly;

  constructor(
    private readonly store: ResponsesStore,
    @Inject(CONFIG) config: CortexConfig,
  ) {
    this.assembly = new ResponsesAssembly(config.responses.reasoningKey);
  }

  /** Seals reasoning (`responses.reasoning_key`); undefined without a key. */
  get seal(): ReasoningSeal | undefined {
    return this.assembly.seal;
  }

  /**
   * Decodes a body and rebuilds the conversation it continues; `session` is a session header's affinity
   * key. A WebSocket turn (`socket`) continues its connection's latest response from memory when it
   * names it, and gets the conversation before its input back in the state.
   */
  async decode(
    body: unknown,
    session?: string,
    options: DecodeOptions = {},
    socket?: SocketTurn,
  ): Promise<AssembledResponses> {
    const decoded = decodeResponsesRequest(body, options);
    const responseId = newResponseId();
    return this.assembly.assemble(
      decoded,
      responseId,
      await this.gather(decoded, session, socket),
      socket !== undefined,
    );
  }

  /**
   * `POST /v1/responses/compact`: the conversation (the previous response's chain, then `input`) split
   * into the older items the model summarises and the latest ones kept verbatim, with the request that
   * asks the model for the summary (`COMPACTION_PROMPT` after the older items).
   */
  async compaction(body: unknown, session?: string): Promise<CompactionPlan> {
    const decoded = decodeResponsesRequest(compactCreateBody(body));
    const responseId = newResponseId();
    const { history, referenced, affinity: gathered } = await this.gather(decoded, session);
    const input = this.assembly.input(decoded, responseId, referenced);
    const affinity = gathered ?? (decoded.store ? affinityKey.response(responseId) : undefined);
    const { older, recent } = splitForCompaction([...history, ...input]);
    if (recent.length === 0 && older.length === 0)
      throw new CortexError('invalid_request', 'input: there is nothing to compact', { param: 'input' });
    if (older.length === 0) return { request: null, recent };
    const messages = [
      ...conversationMessages(decoded.instructions, older),
      { role: 'user' as const, content: COMPACTION_PROMPT },
    ];
    const request = {
      model: decoded.request.model,
      messages,
      sampling: { maxTokens: COMPACTION_MAX_TOKENS },
      stream: true,
      ...(affinity && { affinityKey: affinity }),
    };
    return { request, recent };
  }

  /** What a body continues (its chain, conversation or the WebSocket's latest response) and the items its references name. */
  private async gather(
    decoded: DecodedResponsesRequest,
    session: string | undefined,
    socket?: SocketTurn,
  ): Promise<ResponsesContext> {
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
        throw new CortexError(
          'previous_response_not_found',
          `Previous response with id '${decoded.previousResponseId}' not found.`,
          {
            param: 'previous_response_id',
          },
        );
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
    const referenced = await this.referencedItems(decoded.itemReferences, fetched);
    return { history, chain, conversationItems, affinity, referenced };
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
      ...(state.echo.background && {
        background: {
          echo: state.echo,
          sealReasoning: state.sealReasoning,
          ...(state.toolNamespaces && { toolNamespaces: state.toolNamespaces }),
        },
      }),
      // A WebSocket turn that continues an unstored response: no chain leads here, so keep what came before.
      ...(state.chain.length === 0 && !state.conversation && state.history?.length && { history: state.history }),
    };
    if (!(await this.store.put(stored, revision))) return;
    // A background response joins its conversation once, when it has finished.
    if (state.conversation && isTerminalStatus(resource.status))
      await this.store.appendToConversation(state.conversation, [...state.input, ...resource.output]);
  }

  async delete(id: string): Promise<{ id: string; object: 'response'; deleted: true }> {
    if (!(await this.store.delete(id))) throw notFound(id);
    return { id, object: 'response', deleted: true };
  }

  /** This response's input items, newest first by default, paginated by item id. */
  async inputItems(
    id: string,
    options: { after?: string; limit?: number; order?: 'asc' | 'desc' },
  ): Promise<Record<string, unknown>> {
    const stored = await this.required(id);
    const limit = options.limit ?? 20;
    if (!Number.isInteger(limit) || limit < 1 || limit > 100)
      throw new CortexError('invalid_request', 'limit: must be an integer from 1 to 100', { param: 'limit' });
    const ordered = options.order === 'asc' ? [...stored.input] : [...stored.input].reverse();
    let start = 0;
    if (options.after) {
      const at = ordered.findIndex((item) => item.id === options.after);
      if (at === -1)
        throw new CortexError('invalid_request', `after: no input item '${options.after}' in ${id}`, {
          param: 'after',
        });
      start = at + 1;
    }
    const data = ordered.slice(start, start + limit).map(withoutSummary);
    return {
      object: 'list',
      data,
      first_id: data[0]?.id ?? null,
      last_id: data.at(-1)?.id ?? null,
      has_more: start + limit < ordered.length,
    };
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
          `Response '${ids[i]}', an earlier turn of '${last.resource.id}', ` +
            'is no longer stored (expired or deleted), so the conversation ' +
            'cannot be rebuilt; start a new one or send the history as input.',
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
  private async referencedItems(
    ids: readonly string[],
    fetched: readonly StoredResponse[],
  ): Promise<Map<string, ResponsesItem>> {
    const known = new Map(fetched.map((stored) => [stored.resource.id, stored]));
    const responseIds = [...new Set(ids.map(responseIdOfAnyItem).filter((id): id is string => id !== undefined))];
    const holders = await Promise.all(responseIds.map((id) => known.get(id) ?? this.store.get(id)));
    const found = new Map<string, ResponsesItem>();
    for (const stored of holders) {
      for (const item of [...(stored?.input ?? []), ...(stored?.resource.output ?? [])])
        if (item.id) found.set(item.id, item as ResponsesItem);
    }
    return found;
  }
}

/**
 * What `compaction` hands the gateway: the summarisation request (null when nothing is older than the latest user turn)
 * and the items kept.
 */
export interface CompactionPlan {
  request: CanonicalRequest | null;
  recent: ResponsesItem[];
}

export function notFound(id: string): CortexError {
  return new CortexError('not_found', `Response with id '${id}' not found.`, { param: 'response_id' });
}
