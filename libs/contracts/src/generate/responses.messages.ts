import { array, boolean, defined, number, object, oneOf, optionalArray, optionalInteger, optionalString, string, type Json } from '../fields.js';

/** `responses.get` and `responses.delete`: the response by id. */
export interface ResponseIdCommand {
  id: string;
}

/** `responses.input_items`: one page of a stored response's input. */
export interface InputItemsCommand extends ResponseIdCommand {
  after?: string;
  limit?: number;
  order?: 'asc' | 'desc';
}

/**
 * `responses.store`: the state the translator handed out with the decoded request, and the finished
 * resource. Both are the translator's own shapes (see @cortex/wire); the bus contract checks what
 * the store reads from them.
 */
export interface StoreResponseCommand {
  state: Json & { responseId: string; createdAt: number; store: boolean; input: unknown[]; chain: string[] };
  resource: Json & { id: string };
}

export function decodeResponseId(value: unknown): ResponseIdCommand {
  return { id: string(object(value, 'payload').id, 'id') };
}

export function decodeInputItems(value: unknown): InputItemsCommand {
  const command = object(value, 'payload');
  return defined({
    id: string(command.id, 'id'),
    after: optionalString(command.after, 'after'),
    limit: optionalInteger(command.limit, 'limit', 1, 100),
    order: command.order === undefined || command.order === null ? undefined : oneOf(command.order, 'order', ['asc', 'desc'] as const),
  });
}

export function decodeStoreResponse(value: unknown): StoreResponseCommand {
  const command = object(value, 'payload');
  const state = object(command.state, 'state');
  string(state.responseId, 'state.responseId');
  number(state.createdAt, 'state.createdAt');
  boolean(state.store, 'state.store');
  array(state.input, 'state.input').forEach((item, i) => object(item, `state.input[${i}]`));
  array(state.chain, 'state.chain').forEach((id, i) => string(id, `state.chain[${i}]`));
  optionalString(state.conversation, 'state.conversation');
  optionalInteger(state.conversationItems, 'state.conversationItems', 0);
  optionalString(state.affinityKey, 'state.affinityKey');
  optionalArray(state.history, 'state.history')?.forEach((item, i) => object(item, `state.history[${i}]`));
  const resource = object(command.resource, 'resource');
  string(resource.id, 'resource.id');
  return { state: state as StoreResponseCommand['state'], resource: resource as StoreResponseCommand['resource'] };
}
