import {
  CortexError,
  type CanonicalImage,
  type CanonicalMessage,
  type CanonicalRequest,
  type Sampling,
  type TokenLogprob,
  type UpstreamApi,
} from '@cortex/contracts';

/**
 * What an upstream's answer says, read from its SSE: the same deltas a local engine emits, then its
 * usage and how it ended. The remote engine turns these into stream events.
 */
export type UpstreamEvent =
  | { type: 'text'; text: string; logprobs?: TokenLogprob[] }
  | { type: 'reasoning'; text: string }
  /** A tool call begins: `index` counts the calls of the answer from 0, in the order they began. */
  | { type: 'tool_call'; index: number; id: string; name: string }
  | { type: 'tool_args'; index: number; delta: string }
  /** Token counts as the upstream reported them so far (later reports replace earlier ones field by field). */
  | { type: 'usage'; usage: UpstreamUsage }
  | { type: 'finish'; reason: 'stop' | 'length' | 'tool_calls'; stopSequence?: string }
  /** The upstream ended the stream with an error of its own (`status` where it said one). */
  | { type: 'error'; message: string; status?: number };

export interface UpstreamUsage {
  promptTokens?: number;
  cachedPromptTokens?: number;
  completionTokens?: number;
  reasoningTokens?: number;
}

/** Reads one API's SSE: each message in, the events it completes out; `end` when the body ends. */
export interface UpstreamDecoder {
  push(message: { event?: string | undefined; data: string }): UpstreamEvent[];
  /** Whether the upstream said its answer is complete (a finish, or the API's end marker). */
  readonly done: boolean;
}

/** The request body for one API, and the path under the upstream's URL it is posted to. */
export interface UpstreamBody {
  path: string;
  body: Record<string, unknown>;
  /**
   * The end of the request's `prefill` the API could not be sent (Anthropic's prefill may not end in
   * white space): the answer's first text repeats it, and is given without it.
   */
  heldBack?: string;
}

/** What an encoder needs besides the request: the upstream's name for the model, and whether it reasons. */
export interface EncodeOptions {
  model: string;
  reasoning: boolean;
}

/** The sampling fields each API takes; a request setting another is refused naming it (see refuseUncarried). */
export const CARRIED_SAMPLING: Record<UpstreamApi, ReadonlySet<keyof Sampling>> = {
  // llama.cpp's and vLLM's servers take the extensions too; OpenAI's refuses them itself, as it should.
  chat: new Set<keyof Sampling>([
    'temperature',
    'topP',
    'topK',
    'minP',
    'repetitionPenalty',
    'seed',
    'maxTokens',
    'stop',
    'presencePenalty',
    'frequencyPenalty',
    'logitBias',
  ]),
  responses: new Set<keyof Sampling>(['temperature', 'topP', 'maxTokens']),
  messages: new Set<keyof Sampling>(['temperature', 'topP', 'topK', 'maxTokens', 'stop']),
};

/** The names a client writes these sampling fields under (the Chat Completions and llama.cpp spelling). */
const SAMPLING_NAMES: Record<keyof Sampling, string> = {
  temperature: 'temperature',
  topP: 'top_p',
  topK: 'top_k',
  minP: 'min_p',
  repetitionPenalty: 'repetition_penalty',
  repeatLastN: 'repeat_last_n',
  seed: 'seed',
  maxTokens: 'max_tokens',
  stop: 'stop',
  presencePenalty: 'presence_penalty',
  frequencyPenalty: 'frequency_penalty',
  logitBias: 'logit_bias',
  xtc: 'xtc_probability',
  dry: 'dry_multiplier',
};

const API_NAMES: Record<UpstreamApi, string> = {
  chat: 'an OpenAI Chat Completions API',
  responses: 'an OpenAI Responses API',
  messages: 'an Anthropic Messages API',
};

/**
 * Refuses, with `invalid_request` naming the field, what the upstream's API cannot carry: a sampling
 * field it has no name for (but `seed`, which is left out: every run has one), a legacy raw prompt,
 * and the extras named in `also` (log-probabilities, a response format) where the API lacks them.
 */
export function refuseUncarried(
  request: CanonicalRequest,
  api: UpstreamApi,
  also: ReadonlyArray<{ param: string; set: boolean }> = [],
): void {
  const refuse = (param: string): never => {
    throw new CortexError(
      'invalid_request',
      `${param}: ${request.model} is served by ${API_NAMES[api]}, which takes no ${param}; remove it`,
      { param },
    );
  };
  if (request.raw) refuse('prompt');
  for (const key of Object.keys(request.sampling) as Array<keyof Sampling>) {
    // Every run has a seed (the gateway draws one when the client set none): an API without one is not sent it.
    if (key === 'seed') continue;
    if (request.sampling[key] !== undefined && !CARRIED_SAMPLING[api].has(key)) refuse(SAMPLING_NAMES[key]);
  }
  for (const { param, set } of also) if (set) refuse(param);
}

type Part = Record<string, unknown>;

/** A message's text and images in order, as a dialect's content parts (text parts between the images). */
export function contentParts(
  message: CanonicalMessage,
  text: (text: string) => Part,
  image: (image: CanonicalImage & { data: string; mediaType: string }) => Part,
): Part[] {
  const parts: Part[] = [];
  let at = 0;
  for (const input of message.images ?? []) {
    if (input.data === undefined || input.mediaType === undefined)
      throw new CortexError('internal', `${input.part}: an image reached the worker without its bytes`);
    if (input.at > at) parts.push(text(message.content.slice(at, input.at)));
    parts.push(image({ ...input, data: input.data, mediaType: input.mediaType }));
    at = input.at;
  }
  if (at < message.content.length || parts.length === 0) parts.push(text(message.content.slice(at)));
  return parts;
}

/** The system messages, joined by blank lines as the APIs with one instructions field take them. */
export function systemText(messages: readonly CanonicalMessage[]): string | undefined {
  const system = messages.filter((m) => m.role === 'system').map((m) => m.content);
  return system.length > 0 ? system.join('\n\n') : undefined;
}

/** A JSON text's value, or undefined when it is not JSON (an SSE message from a server that breaks the format). */
export function parseJson(data: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(data);
    return value !== null && typeof value === 'object' && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : undefined;
  } catch {
    return undefined;
  }
}

/** A field of an object that may be anything: the object, or undefined. */
export function record(value: unknown): Record<string, unknown> | undefined {
  return value !== null && typeof value === 'object' && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : undefined;
}

export const str = (value: unknown): string | undefined => (typeof value === 'string' ? value : undefined);
export const num = (value: unknown): number | undefined =>
  typeof value === 'number' && Number.isFinite(value) ? value : undefined;

/** Token counts from an API's usage object, each read at its path (`prompt_tokens_details.cached_tokens`); absent ones left out. */
export function readUsage(
  usage: Record<string, unknown>,
  paths: { readonly [K in keyof UpstreamUsage]-?: string },
): UpstreamUsage {
  const out: UpstreamUsage = {};
  for (const [key, path] of Object.entries(paths) as Array<[keyof UpstreamUsage, string]>) {
    const value = num(path.split('.').reduce<unknown>((at, name) => record(at)?.[name], usage));
    if (value !== undefined) out[key] = value;
  }
  return out;
}
