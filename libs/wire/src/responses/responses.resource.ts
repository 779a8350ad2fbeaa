import { ErrorCodes, type ErrorBody, type Usage } from '@cortex/contracts';
import type {
  ResponseBody,
  ResponseEcho,
  ResponseResource,
  ResponsesErrorPayload,
  ResponsesUsage,
} from './responses.types.js';

/** Which names carry reasoning text in a stream (see `ReasoningEventType`). */
export type ReasoningEventFamily = 'openai' | 'openresponses';

export interface ResponsesEncoderOptions {
  /** The response id, `resp_…`; output item ids are derived from it (`outputItemId`). */
  id: string;
  /** Unix seconds. */
  createdAt: number;
  /** The request's settings, from `decodeResponsesRequest(...).echo`. */
  echo: ResponseEcho;
  /**
   * 'openai' (default): `response.reasoning_text.delta|done`, which the official `openai` client accepts.
   * 'openresponses': the spec's `response.reasoning.delta|done`, which that client rejects.
   */
  reasoningEvents?: ReasoningEventFamily;
  /** Seals each reasoning item's text into its `encrypted_content` (the request included `reasoning.encrypted_content`). */
  sealReasoning?: (text: string) => string;
  /** Function name → namespace (`decodeResponsesRequest(...).toolNamespaces`): calls of those functions carry it. */
  toolNamespaces?: Record<string, string>;
  /** The fallback model serving the request, once one does: the resource names it from its first frame on. */
  servedBy?: () => string | null;
  /** Clock for `completed_at`, in Unix seconds (tests pin it). */
  now?: () => number;
}

/**
 * Output item ids derive from the response id (`resp_X` → `msg_X_0`, `fc_X_1`, `rs_X_2`): unique as long as
 * response ids are, and an item id names the response that holds it (`responseIdOfAnyItem`), which is how
 * a store finds the item an `item_reference` points at.
 */
export function outputItemId(responseId: string, prefix: 'msg' | 'fc' | 'rs', outputIndex: number): string {
  return `${prefix}_${responseId.replace(/^resp_/, '')}_${outputIndex}`;
}

/** A resource with no output yet: what `response.created` carries. */
export function emptyResponseResource(options: ResponsesEncoderOptions): ResponseResource {
  const { model, previous_response_id, instructions, ...echo } = structuredClone(options.echo);
  // Keys in the schema's order, so a stored or printed resource reads like the spec's example.
  return {
    id: options.id,
    object: 'response',
    created_at: options.createdAt,
    completed_at: null,
    status: 'in_progress',
    incomplete_details: null,
    model,
    previous_response_id,
    instructions,
    output: [],
    error: null,
    ...echo,
    usage: null,
  };
}

/** Canonical usage → Responses usage: `output_tokens` includes the reasoning tokens, as OpenAI counts them. */
export function responsesUsage(usage: Usage): ResponsesUsage {
  return {
    input_tokens: usage.promptTokens,
    input_tokens_details: { cached_tokens: usage.cachedPromptTokens },
    output_tokens: usage.completionTokens,
    output_tokens_details: { reasoning_tokens: usage.reasoningTokens },
    total_tokens: usage.promptTokens + usage.completionTokens,
  };
}

/** All `output_text` of the resource's assistant messages, joined: OpenAI's `output_text` convenience. */
export function responseOutputText(resource: ResponseResource): string {
  return resource.output
    .flatMap((item) =>
      item.type === 'message' ? item.content.flatMap((part) => ('text' in part ? [part.text] : [])) : [],
    )
    .join('');
}

/** The non-streaming body: the resource plus `output_text` (the openai client computes the same). */
export function withOutputText(resource: ResponseResource): ResponseBody {
  return { ...resource, output_text: responseOutputText(resource) };
}

/** The `error` object of a stream's `error` event (`ErrorPayload`). */
export function responsesErrorPayload(error: ErrorBody): ResponsesErrorPayload {
  return { type: typeOf(error), code: error.code, message: error.message, param: error.param ?? null };
}

function typeOf(error: ErrorBody): string {
  return Object.hasOwn(ErrorCodes, error.code) ? ErrorCodes[error.code].type : 'api_error';
}
