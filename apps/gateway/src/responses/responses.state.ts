import { malformedAs } from '@cortex/bus';
import { Subjects } from '@cortex/contracts';
import { decodeResponsesState, type ResponsesState } from '@cortex/wire';

/**
 * The Responses state a translator handed out with a decoded request (`DecodedRequest.state`, which the
 * shared request path passes on unread): read, never cast. A bad one is the translator's fault, so it
 * is `internal` naming the field, raised before the request is placed.
 */
export function responsesStateOf(state: unknown): ResponsesState {
  const known = typeof state === 'object' && state !== null ? read.get(state) : undefined;
  if (known) return known;
  const checked = malformedAs(Subjects.translatorDecode, () => decodeResponsesState(state));
  if (typeof state === 'object' && state !== null) read.set(state, checked);
  return checked;
}

/** Each state read once (a WebSocket turn needs it for the stream and again for the connection's memory). */
const read = new WeakMap<object, ResponsesState>();
