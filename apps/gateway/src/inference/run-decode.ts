import {
  decodeDecodedRequest,
  Subjects,
  type CanonicalRequest,
  type Dialect,
  type RetrievalApi,
} from '@cortex/contracts';
import {
  continuesStoredState,
  decodeBody,
  decodeResponsesRequest,
  namesStoredState,
  newResponseId,
  placementHint,
  refuseImages,
  type AssembledResponses,
  type DecodeOptions,
  type ResponsesAssembly,
  type ResponsesState,
} from '@cortex/wire';
import type { EarlyPlacement } from './placement-client.js';
import type { RunServices } from './run-services.js';
import { takeImages } from '../media/take-images.js';

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
 * Decodes a body here when it depends on nothing stored: Chat Completions, Messages and Completions
 * bodies always, a Responses body (not a WebSocket turn) that continues no stored state. Otherwise the
 * translator service, which holds the Responses API's stored state, decodes it; unless `placeEarly` is
 * false, the router is asked meanwhile (see PlacementClient.askEarly). Either way its images are
 * read here, or refused for a model that takes none (see withImages).
 */
export async function decodeForRun(service: RunServices, ask: DecodeAsk): Promise<RunDecoded> {
  const { dialect, requestId, body, session, socket } = ask;
  let local: (ReturnType<typeof decodeBody> & { state?: ResponsesState }) | null;
  try {
    const options = { hostedTools: service.config.gateway.hostedTools };
    local =
      dialect === 'openai.responses'
        ? socket
          ? null
          : decodeResponsesHere(service.responses, body, session, options)
        : decodeBody(dialect, body, session, options);
  } catch (error) {
    service.logger.log({ msg: `rejected ${dialect}: ${(error as Error).message}`, requestId });
    throw error;
  }
  if (local) {
    if (local.droppedTools.length > 0)
      service.logger.log({
        msg: `dropped tools the model cannot run: ${local.droppedTools.join(', ')}`,
        requestId,
        dialect,
      });
    const request = await withImages(service, local.request, dialect);
    return { request, ...(local.state && { state: local.state }), early: null };
  }
  const hint = ask.placeEarly ? placementHint(body, session) : null;
  const early = hint && service.placer.askEarly(hint, requestId);
  const decoded = await service.bus.request(
    Subjects.translatorDecode,
    { dialect, body, ...(session && { session }), ...(socket && { socket }) },
    { requestId, decode: decodeDecodedRequest },
  );
  return { ...decoded, request: await withImages(service, decoded.request, dialect), early };
}

/**
 * A request's images read (URLs fetched, bytes checked: see takeImages) for a model with a projector
 * or an upstream that takes images (`upstream.vision`); for any other model, refused (see refuseImages).
 */
async function withImages(
  service: RunServices,
  request: CanonicalRequest,
  dialect: Dialect | RetrievalApi,
): Promise<CanonicalRequest> {
  if (!request.messages.some((message) => message.images?.length)) return request;
  const model = service.catalogue.find(request.model);
  if (model?.mmproj === undefined && model?.upstream?.vision !== true) refuseImages(request, dialect);
  return takeImages(request, service.config.gateway.images);
}

/** A Responses body assembled with an empty context, or null when it continues stored state (the translator's to gather). */
function decodeResponsesHere(
  assembly: ResponsesAssembly,
  body: unknown,
  session: string | undefined,
  options: DecodeOptions,
): AssembledResponses | null {
  if (namesStoredState(body)) return null;
  const decoded = decodeResponsesRequest(body, options);
  if (continuesStoredState(decoded)) return null;
  return assembly.assemble(decoded, newResponseId(), {
    history: [],
    chain: [],
    affinity: session ?? decoded.request.affinityKey,
    referenced: new Map(),
  });
}
