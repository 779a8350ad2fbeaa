import { decodeDecodedRequest, Subjects, type CanonicalRequest, type Dialect, type RetrievalApi } from '@cortex/contracts';
import { decodeBody, placementHint } from '@cortex/wire';
import type { EarlyPlacement } from './placement-client.js';
import type { RunServices } from './run-services.js';

/** What a run's `decode` asks: the body, a session header's key, a WebSocket turn's additions, whether to ask the router early. */
export interface DecodeAsk {
  dialect: Dialect | RetrievalApi;
  requestId: string;
  body: unknown;
  session: string | undefined;
  socket: object | undefined;
  placeEarly: boolean;
}

/** A decoded request, the translator's dialect state, and the router's answer asked while it decoded. */
export interface RunDecoded {
  request: CanonicalRequest;
  state?: unknown;
  early: EarlyPlacement | null;
}

/**
 * Decodes a body: here for the dialects whose bodies decode alone (chat, messages, completions), else
 * in the translator service, which holds the Responses API's stored state. Unless `placeEarly` is
 * false, the router is asked while the translator decodes (see PlacementClient.askEarly).
 */
export async function decodeForRun(service: RunServices, ask: DecodeAsk): Promise<RunDecoded> {
  const { dialect, requestId, body, session, socket } = ask;
  let local: ReturnType<typeof decodeBody>;
  try {
    local = decodeBody(dialect, body, session, { hostedTools: service.config.gateway.hostedTools });
  } catch (error) {
    service.logger.log({ msg: `rejected ${dialect}: ${(error as Error).message}`, requestId });
    throw error;
  }
  if (local) {
    if (local.droppedTools.length > 0) service.logger.log({ msg: `dropped tools the model cannot run: ${local.droppedTools.join(', ')}`, requestId, dialect });
    return { request: local.request, early: null };
  }
  const hint = ask.placeEarly ? placementHint(body, session) : null;
  const early = hint && service.placer.askEarly(hint, requestId);
  const decoded = await service.bus.request(Subjects.translatorDecode, { dialect, body, ...(session && { session }), ...(socket && { socket }) }, { requestId, decode: decodeDecodedRequest });
  return { ...decoded, early };
}
