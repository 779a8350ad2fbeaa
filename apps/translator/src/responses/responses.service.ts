import { randomBytes } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import { CortexError, type DecodedRequest } from '@cortex/contracts';
import {
  affinityKey,
  conversationMessages,
  decodeResponsesRequest,
  inputItemId,
  resolveItemReferences,
  responseIdOfAnyItem,
  type ResponseResource,
  type ResponsesItem,
  type ResponsesState,
  type StoredResponse,
} from '@cortex/wire';
import { ResponsesStore } from './responses.store.js';

/** Responses API state: history for `previous_response_id` and `conversation`, storage, listing. */
@Injectable()
export class ResponsesService {
  constructor(private readonly store: ResponsesStore) {}

  /** Decodes a body and rebuilds the conversation it continues. */
  async decode(body: unknown): Promise<DecodedRequest> {
    const decoded = decodeResponsesRequest(body);
    const responseId = `resp_${randomBytes(16).toString('hex')}`;
    let history: ResponsesItem[] = [];
    // The conversation's worker affinity: the client's cache key, else the conversation, else the
    // chain's first response (each response stores the key it ran under, and follow-ups inherit it).
    let affinity = decoded.request.affinityKey;
    if (decoded.previousResponseId) {
      const previous = await this.store.get(decoded.previousResponseId);
      if (!previous) {
        throw new CortexError('previous_response_not_found', `Previous response with id '${decoded.previousResponseId}' not found.`, {
          param: 'previous_response_id',
        });
      }
      history = [...previous.history, ...previous.input, ...previous.resource.output];
      affinity ??= previous.affinityKey ?? affinityKey.response(previous.resource.id);
    } else if (decoded.conversation) {
      history = await this.store.conversation(decoded.conversation);
      affinity ??= affinityKey.conversation(decoded.conversation);
    }
    // An unstored response cannot be continued, so it starts no chain worth remembering.
    if (decoded.store) affinity ??= affinityKey.response(responseId);
    const referenced = await this.referencedItems(decoded.itemReferences);
    const input = resolveItemReferences(decoded.input, referenced).map((item, i) =>
      item.id === undefined ? ({ ...item, id: inputItemId(responseId, i) } as ResponsesItem) : item,
    );
    const messages = conversationMessages(decoded.instructions, [...history, ...input]);
    if (messages.length === 0) throw new CortexError('invalid_request', 'input: there is nothing to respond to', { param: 'input' });
    const state: ResponsesState = {
      responseId,
      createdAt: Math.floor(Date.now() / 1000),
      echo: decoded.echo,
      store: decoded.store,
      input,
      history,
      ...(decoded.conversation !== undefined && { conversation: decoded.conversation }),
      affinityKey: affinity,
    };
    return { request: { ...decoded.request, messages, affinityKey: affinity }, state };
  }

  async save(state: ResponsesState, resource: ResponseResource): Promise<void> {
    if (!state.store) return;
    const stored: StoredResponse = {
      resource,
      input: state.input,
      history: state.history,
      ...(state.conversation && { conversation: state.conversation }),
      ...(state.affinityKey && { affinityKey: state.affinityKey }),
    };
    await this.store.put(stored);
    if (state.conversation) await this.store.appendToConversation(state.conversation, [...state.input, ...resource.output]);
  }

  async get(id: string): Promise<ResponseResource> {
    return (await this.required(id)).resource;
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
    const data = ordered.slice(start, start + limit);
    return { object: 'list', data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: start + limit < ordered.length };
  }

  private async required(id: string): Promise<StoredResponse> {
    const stored = await this.store.get(id);
    if (!stored) throw notFound(id);
    return stored;
  }

  /** Fetches the responses that hold the referenced items and indexes their items by id. */
  private async referencedItems(ids: readonly string[]): Promise<Map<string, ResponsesItem>> {
    const found = new Map<string, ResponsesItem>();
    const responseIds = new Set(ids.map(responseIdOfAnyItem).filter((id): id is string => id !== undefined));
    for (const responseId of responseIds) {
      const stored = await this.store.get(responseId);
      for (const item of [...(stored?.input ?? []), ...(stored?.resource.output ?? [])]) if (item.id) found.set(item.id, item as ResponsesItem);
    }
    return found;
  }
}

function notFound(id: string): CortexError {
  return new CortexError('not_found', `Response with id '${id}' not found.`, { param: 'response_id' });
}
