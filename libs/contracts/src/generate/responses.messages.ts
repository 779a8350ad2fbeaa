import { defined, object, oneOf, optionalInteger, optionalString, string } from '../fields.js';

// The Responses API's bus commands. `responses.store` carries the Responses state and resource: its
// reader, `decodeStoreCommand`, lives in @cortex/wire beside their types.

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

export function decodeResponseId(value: unknown): ResponseIdCommand {
  return { id: string(object(value, 'payload').id, 'id') };
}

export function decodeInputItems(value: unknown): InputItemsCommand {
  const command = object(value, 'payload');
  return defined({
    id: string(command.id, 'id'),
    after: optionalString(command.after, 'after'),
    limit: optionalInteger(command.limit, 'limit', 1, 100),
    order:
      command.order === undefined || command.order === null
        ? undefined
        : oneOf(command.order, 'order', ['asc', 'desc'] as const),
  });
}
