import { CortexError, type Reply } from '@cortex/contracts';

// Re-exported so `@cortex/bus` users keep one import; the definitions live in `@cortex/contracts`.
export { REQUEST_ID_HEADER, type Reply } from '@cortex/contracts';

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** JSON for the bus; a value too deep for `JSON.stringify` is the sender's bad input, not a crash. */
export function encodeJson(value: unknown): Uint8Array {
  try {
    return encoder.encode(JSON.stringify(value));
  } catch (error) {
    if (error instanceof RangeError)
      throw new CortexError('invalid_request', 'the message nests too deeply to be encoded as JSON', { cause: error });
    throw error;
  }
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
