import { CortexError, type ErrorBody } from '@cortex/contracts';

/** Every bus reply is one of these, JSON-encoded: plain data, no transport framing. */
export type Reply<T> = { ok: true; data: T } | { ok: false; error: ErrorBody };

export const REQUEST_ID_HEADER = 'x-request-id';

const encoder = new TextEncoder();
const decoder = new TextDecoder();

export function encodeJson(value: unknown): Uint8Array {
  return encoder.encode(JSON.stringify(value));
}

export function decodeJson(data: Uint8Array): unknown {
  try {
    return JSON.parse(decoder.decode(data));
  } catch (error) {
    throw new CortexError('invalid_request', 'bus message is not valid JSON', { cause: error });
  }
}

export function errorReply(error: unknown): Reply<never> {
  if (error instanceof CortexError) return { ok: false, error: error.toBody() };
  const message = error instanceof Error ? error.message : String(error);
  return { ok: false, error: { code: 'internal', message } };
}
