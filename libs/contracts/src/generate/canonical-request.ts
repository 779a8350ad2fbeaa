import {
  array,
  fail,
  integer,
  maxLength,
  object,
  oneOf,
  optionalArray,
  optionalBoolean,
  optionalInteger,
  optionalNumber,
  optionalObject,
  optionalString,
  string,
  type Json,
} from '../fields.js';

export const ROLES = ['system', 'user', 'assistant', 'tool'] as const;
export type Role = (typeof ROLES)[number];

export interface ToolCall {
  id: string;
  name: string;
  /** JSON text of the arguments, as the model wrote it. */
  arguments: string;
}

/**
 * An image in a message's content. A dialect's decoder gives its bytes (base64, with the type the
 * client claimed) or its URL; the gateway fetches URLs and reads every image's type and size from its
 * bytes (`apps/gateway/src/media/image-source.ts`), so a worker only ever gets `data` with `mediaType`.
 */
export interface CanonicalImage {
  /** The character offset in `content` where the image stands; a message's images are in order. */
  at: number;
  /** Where the client's body had it, to name it in errors: `messages[0].content[1]`. */
  part: string;
  /** The bytes, base64. */
  data?: string;
  mediaType?: string;
  /** An http(s) URL the gateway has still to fetch. */
  url?: string;
  width?: number;
  height?: number;
  /** OpenAI's `detail`: how finely the client asked the image to be seen. */
  detail?: 'auto' | 'low' | 'high';
}

/** One conversation turn after dialect decoding: text, images where they stood in it, tool calls and results as fields. */
export interface CanonicalMessage {
  role: Role;
  content: string;
  images?: CanonicalImage[];
  reasoning?: string;
  toolCalls?: ToolCall[];
  toolCallId?: string;
  name?: string;
}

/** The images of a request, in order, with the message each is in. */
export function requestImages(request: Pick<CanonicalRequest, 'messages'>): CanonicalImage[] {
  return request.messages.flatMap((message) => message.images ?? []);
}

export interface ToolDefinition {
  name: string;
  description?: string;
  parameters?: Record<string, unknown>;
  /**
   * The call's arguments must match `parameters`: one that does not is an error, never returned (others are returned as
   * written, with a warning).
   */
  strict?: boolean;
}

export interface Sampling {
  /** 0 to 2. */
  temperature?: number;
  /** 0 to 1. */
  topP?: number;
  /** Only the K likeliest tokens (absent: node-llama-cpp's 40). */
  topK?: number;
  /** 0 to 1: tokens less likely than this share of the likeliest one's probability are dropped. */
  minP?: number;
  /**
   * Above 0 (1: none): the latest `repeatLastN` tokens of the prompt and the output are made less
   * likely by this factor (llama.cpp's `repeat_penalty`, vLLM's `repetition_penalty`).
   */
  repetitionPenalty?: number;
  /** How many of the latest tokens the repetition penalty looks at (64 when absent). */
  repeatLastN?: number;
  seed?: number;
  maxTokens?: number;
  /** At most 16, each at most 256 characters. */
  stop?: string[];
  /** -2 to 2. */
  presencePenalty?: number;
  /** -2 to 2. */
  frequencyPenalty?: number;
  /**
   * Added to the logits of these tokens (ids of the model's vocabulary, as decimal strings) before
   * sampling, -100 to 100 each (OpenAI's `logit_bias`; -100 in effect bans a token). At most 1,024.
   */
  logitBias?: Record<string, number>;
  /**
   * Exclude Top Choices (llama.cpp's `xtc_probability`, `xtc_threshold`): at each step, with this
   * probability, every token at least `threshold` likely but the least likely of them is removed.
   */
  xtc?: { probability: number; threshold: number };
  /**
   * DRY, "don't repeat yourself" (llama.cpp's `dry_*`): a token that would extend a repeat of more
   * than `allowedLength` tokens within the latest `lastN` (absent: the whole context) is penalized by
   * `multiplier * base ^ (length - allowedLength)`; `sequenceBreakers` end a repeat.
   */
  dry?: { multiplier: number; base?: number; allowedLength?: number; lastN?: number; sequenceBreakers?: string[] };
}

/** What a model's maker (its GGUF's `general.sampling.*`) or the catalogue may set for requests that leave it out. */
export type SamplingDefaults = Pick<
  Sampling,
  'temperature' | 'topP' | 'topK' | 'minP' | 'repetitionPenalty' | 'repeatLastN'
>;

export const SAMPLING_DEFAULT_KEYS = [
  'temperature',
  'topP',
  'topK',
  'minP',
  'repetitionPenalty',
  'repeatLastN',
] as const satisfies ReadonlyArray<keyof SamplingDefaults>;

/**
 * What a request that sets nothing samples with, where neither the model's GGUF nor the catalogue
 * says otherwise: llama.cpp's defaults except the temperature (0.8, as cortex always had), and no
 * repetition penalty (llama.cpp's own default of 1.0 since 2024).
 */
export const BUILTIN_SAMPLING: Required<SamplingDefaults> = {
  temperature: 0.8,
  topP: 0.95,
  topK: 40,
  minP: 0,
  repetitionPenalty: 1,
  repeatLastN: 64,
};

/**
 * The range each default may take wherever one is read: the bus, the catalogue's `sampling:` block,
 * a GGUF's `general.sampling.*` (a repetition penalty of 1 is none; 0 would divide by zero).
 */
export const SAMPLING_DEFAULT_RANGES: { readonly [K in keyof SamplingDefaults]-?: SamplingRange } = {
  temperature: { min: 0, max: 2, integer: false },
  topP: { min: 0, max: 1, integer: false },
  topK: { min: 0, max: Number.MAX_SAFE_INTEGER, integer: true },
  minP: { min: 0, max: 1, integer: false },
  repetitionPenalty: { min: 0.01, max: 10, integer: false },
  repeatLastN: { min: 0, max: Number.MAX_SAFE_INTEGER, integer: true },
};

export interface SamplingRange {
  min: number;
  max: number;
  integer: boolean;
}

/** Whether `value` is one `key` may take (see SAMPLING_DEFAULT_RANGES). */
export function inSamplingRange(key: keyof SamplingDefaults, value: number): boolean {
  const { min, max, integer } = SAMPLING_DEFAULT_RANGES[key];
  return Number.isFinite(value) && value >= min && value <= max && (!integer || Number.isInteger(value));
}

/** `sampling` with each field it leaves out taken from `defaults`, first to last (the first that sets it wins). */
export function withSamplingDefaults<T extends Sampling>(
  sampling: T,
  ...defaults: ReadonlyArray<SamplingDefaults | undefined>
): T {
  const out: T = { ...sampling };
  for (const key of SAMPLING_DEFAULT_KEYS) {
    if (out[key] !== undefined) continue;
    const value = defaults.find((d) => d?.[key] !== undefined)?.[key];
    if (value !== undefined) out[key] = value;
  }
  return out;
}

/** Sampling defaults as they cross the bus (a GGUF's, the catalogue's): each in the range a request may set. */
export function decodeSamplingDefaults(value: unknown, at: string): SamplingDefaults | undefined {
  const defaults = optionalObject(value, at);
  if (!defaults) return undefined;
  const out: SamplingDefaults = {};
  for (const key of SAMPLING_DEFAULT_KEYS) {
    const { min, max, integer } = SAMPLING_DEFAULT_RANGES[key];
    const n = (integer ? optionalInteger : optionalNumber)(defaults[key], `${at}.${key}`, min, max);
    if (n !== undefined) out[key] = n;
  }
  return out;
}

/** At most this many `logit_bias` entries in one request. */
export const MAX_LOGIT_BIAS = 1024;

export interface ResponseFormat {
  type: 'text' | 'json_object' | 'json_schema';
  schema?: Record<string, unknown>;
}

/**
 * A legacy text completion (`/v1/completions`): the prompt as it is, without a chat template. A
 * request with one has no messages.
 */
export interface RawPrompt {
  /** The prompt as text, or as token ids of the model's vocabulary: exactly one of the two. */
  text?: string;
  tokens?: number[];
  /** Fill-in-the-middle: the text after the gap; needs the model's FIM tokens. */
  suffix?: string;
  /** The prompt is sent back before the completion (`echo`). */
  echo?: boolean;
}

/** The one request shape every dialect decodes into and every worker runs. */
export interface CanonicalRequest {
  model: string;
  messages: CanonicalMessage[];
  tools?: ToolDefinition[];
  /** `auto` (default), `required` (some tool must be called) or `function:<name>` (that one). */
  toolChoice?: string;
  /** At most this many tool calls in the reply (`max_tool_calls`; 1 for `parallel_tool_calls: false`). */
  maxToolCalls?: number;
  sampling: Sampling;
  responseFormat?: ResponseFormat;
  stream: boolean;
  /** Streams end with a usage frame (OpenAI `stream_options.include_usage`). */
  includeUsage?: boolean;
  /** The client asked to see reasoning (Anthropic `thinking`); dialects that always show it ignore this. */
  showReasoning?: boolean;
  /**
   * The client asked for its prompt to stay cached longer (OpenAI `prompt_cache_retention: "24h"`,
   * Anthropic `cache_control` with `ttl: "1h"`): the worker's prompt cache beyond the slots drops the
   * state this request leaves after the states of requests that did not ask.
   */
  keepPromptLonger?: boolean;
  /**
   * Report each generated answer token's log-probability, with this many of the likeliest tokens at
   * its step (0 to 20): Chat Completions' `logprobs` and `top_logprobs`. With a raw prompt's `echo`,
   * the prompt's tokens get theirs too. Absent: none.
   */
  logprobs?: number;
  /**
   * Names the conversation this request continues (a session header, `prompt_cache_key`,
   * `conversation`, the first response of a `previous_response_id` chain), so the router can send it
   * to the worker that already holds its prompt prefix. At most 512 characters.
   */
  affinityKey?: string;
  /**
   * What the model's chat template reads besides the conversation: the client's
   * `chat_template_kwargs`, and the reasoning controls the dialects carry (`reasoning_effort`,
   * `enable_thinking`). At most 16 keys; never the template's own inputs (`messages`, `tools`, …).
   */
  templateOptions?: Record<string, unknown>;
  /** Set for a legacy completion: the worker evaluates this prompt as it is (no chat template). */
  raw?: RawPrompt;
  /**
   * The start of the answer, already written: the model goes on from this text (Anthropic's
   * prefilled last assistant turn, vLLM's and llama.cpp's `continue_final_message`; a stream moved
   * from a place that gave no token ids goes on this way). The answer's events carry only what
   * follows it.
   */
  prefill?: string;
}

/** The template's own inputs, which options may not replace. */
export const TEMPLATE_INPUTS = ['messages', 'tools', 'add_generation_prompt', 'bos_token', 'eos_token'] as const;

/**
 * Checks options for a chat template: an object of at most 16 keys, each a name of letters, digits
 * and underscores (not one of the template's own inputs), its value JSON of at most 4,096 characters.
 */
export function checkTemplateOptions(value: unknown, param: string): Record<string, unknown> {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) fail(param, 'must be an object');
  const entries = Object.entries(value as Record<string, unknown>);
  if (entries.length > 16) fail(param, `has ${entries.length} keys; at most 16`);
  for (const [key, item] of entries) {
    if (!/^[A-Za-z_][A-Za-z0-9_]{0,63}$/.test(key))
      fail(`${param}.${key}`, 'must be a name of letters, digits and underscores (at most 64)');
    if ((TEMPLATE_INPUTS as readonly string[]).includes(key))
      fail(`${param}.${key}`, "is the chat template's own input and cannot be set");
    const json = JSON.stringify(item);
    if (json === undefined || json.length > 4096) fail(`${param}.${key}`, 'must be JSON of at most 4,096 characters');
  }
  return value as Record<string, unknown>;
}

const FORMATS = ['text', 'json_object', 'json_schema'] as const;

/**
 * Checks a canonical request that arrived over the bus and returns it, typed; the first violation
 * throws `invalid_request` naming its path (`<at>.messages[2].role`). Hand-written rather than
 * class-validator: this runs before every generation, and a worker that has been idle pays several
 * times the warm cost of a generic validator (0.38 ms against 0.08 ms, measured).
 */
export function decodeCanonicalRequest(value: unknown, at: string): CanonicalRequest {
  const request = object(value, at);
  string(request.model, `${at}.model`);
  array(request.messages, `${at}.messages`).forEach((message, i) => checkMessage(message, `${at}.messages[${i}]`));
  optionalArray(request.tools, `${at}.tools`)?.forEach((tool, i) => checkTool(tool, `${at}.tools[${i}]`));
  optionalString(request.toolChoice, `${at}.toolChoice`);
  optionalInteger(request.maxToolCalls, `${at}.maxToolCalls`, 1);
  checkSampling(object(request.sampling, `${at}.sampling`), `${at}.sampling`);
  if (request.responseFormat !== undefined && request.responseFormat !== null) {
    const format = object(request.responseFormat, `${at}.responseFormat`);
    oneOf(format.type, `${at}.responseFormat.type`, FORMATS);
    optionalObject(format.schema, `${at}.responseFormat.schema`);
  }
  if (typeof request.stream !== 'boolean') fail(`${at}.stream`, 'must be a boolean');
  optionalBoolean(request.includeUsage, `${at}.includeUsage`);
  optionalBoolean(request.showReasoning, `${at}.showReasoning`);
  optionalBoolean(request.keepPromptLonger, `${at}.keepPromptLonger`);
  optionalInteger(request.logprobs, `${at}.logprobs`, 0, 20);
  maxLength(optionalString(request.affinityKey, `${at}.affinityKey`), 512, `${at}.affinityKey`);
  if (request.templateOptions !== undefined && request.templateOptions !== null)
    checkTemplateOptions(request.templateOptions, `${at}.templateOptions`);
  if (request.raw !== undefined && request.raw !== null) checkRawPrompt(request.raw, `${at}.raw`);
  optionalString(request.prefill, `${at}.prefill`);
  return request as unknown as CanonicalRequest;
}

function checkMessage(value: unknown, at: string): void {
  const message = object(value, at);
  oneOf(message.role, `${at}.role`, ROLES);
  const content = string(message.content, `${at}.content`);
  let last = 0;
  optionalArray(message.images, `${at}.images`)?.forEach((input, i) => {
    const image = object(input, `${at}.images[${i}]`);
    last = integer(image.at, `${at}.images[${i}].at`, last);
    if (last > content.length)
      fail(`${at}.images[${i}].at`, `must be at most the content's length (${content.length})`);
    string(image.part, `${at}.images[${i}].part`);
    const data = optionalString(image.data, `${at}.images[${i}].data`);
    const url = optionalString(image.url, `${at}.images[${i}].url`);
    if ((data === undefined) === (url === undefined)) fail(`${at}.images[${i}]`, 'must have either data or url');
    optionalString(image.mediaType, `${at}.images[${i}].mediaType`);
    optionalInteger(image.width, `${at}.images[${i}].width`, 1);
    optionalInteger(image.height, `${at}.images[${i}].height`, 1);
    if (image.detail !== undefined) oneOf(image.detail, `${at}.images[${i}].detail`, ['auto', 'low', 'high'] as const);
  });
  optionalString(message.reasoning, `${at}.reasoning`);
  optionalArray(message.toolCalls, `${at}.toolCalls`)?.forEach((input, i) => {
    const call = object(input, `${at}.toolCalls[${i}]`);
    for (const field of ['id', 'name', 'arguments'] as const) string(call[field], `${at}.toolCalls[${i}].${field}`);
  });
  optionalString(message.toolCallId, `${at}.toolCallId`);
  optionalString(message.name, `${at}.name`);
}

function checkRawPrompt(value: unknown, at: string): void {
  const raw = object(value, at);
  const text = optionalString(raw.text, `${at}.text`);
  const tokens = optionalArray(raw.tokens, `${at}.tokens`);
  if ((text === undefined) === (tokens === undefined)) fail(at, 'must have either text or tokens');
  tokens?.forEach((token, i) => integer(token, `${at}.tokens[${i}]`, 0));
  optionalString(raw.suffix, `${at}.suffix`);
  optionalBoolean(raw.echo, `${at}.echo`);
}

function checkTool(value: unknown, at: string): void {
  const tool = object(value, at);
  string(tool.name, `${at}.name`);
  optionalString(tool.description, `${at}.description`);
  optionalObject(tool.parameters, `${at}.parameters`);
  optionalBoolean(tool.strict, `${at}.strict`);
}

function checkSampling(sampling: Json, at: string): void {
  decodeSamplingDefaults(sampling, at);
  optionalInteger(sampling.seed, `${at}.seed`, Number.MIN_SAFE_INTEGER);
  // 0: only a legacy completion that echoes its prompt (its log-probabilities, lm-evaluation-harness's loglikelihood).
  optionalInteger(sampling.maxTokens, `${at}.maxTokens`, 0);
  const stops = optionalArray(sampling.stop, `${at}.stop`);
  if (stops && stops.length > 16) fail(`${at}.stop`, `at most 16 stop sequences, got ${stops.length}`);
  stops?.forEach((stop, i) => maxLength(string(stop, `${at}.stop[${i}]`), 256, `${at}.stop[${i}]`));
  optionalNumber(sampling.presencePenalty, `${at}.presencePenalty`, -2, 2);
  optionalNumber(sampling.frequencyPenalty, `${at}.frequencyPenalty`, -2, 2);
  const bias = optionalObject(sampling.logitBias, `${at}.logitBias`);
  if (bias) checkLogitBias(bias, `${at}.logitBias`);
  const xtc = optionalObject(sampling.xtc, `${at}.xtc`);
  if (xtc) {
    optionalNumber(xtc.probability, `${at}.xtc.probability`, 0, 1);
    optionalNumber(xtc.threshold, `${at}.xtc.threshold`, 0, 1);
  }
  const dry = optionalObject(sampling.dry, `${at}.dry`);
  if (dry) {
    optionalNumber(dry.multiplier, `${at}.dry.multiplier`, 0, 100);
    optionalNumber(dry.base, `${at}.dry.base`, 1, 100);
    optionalInteger(dry.allowedLength, `${at}.dry.allowedLength`, 0);
    optionalInteger(dry.lastN, `${at}.dry.lastN`, 0);
    checkBreakers(optionalArray(dry.sequenceBreakers, `${at}.dry.sequenceBreakers`), `${at}.dry.sequenceBreakers`);
  }
}

/** DRY's sequence breakers: at most 16 strings of 1 to 64 characters. */
export function checkBreakers(breakers: unknown[] | undefined, at: string): string[] | undefined {
  if (!breakers) return undefined;
  if (breakers.length > 16) fail(at, `at most 16 sequence breakers, got ${breakers.length}`);
  return breakers.map((breaker, i) => {
    const text = string(breaker, `${at}[${i}]`);
    maxLength(text, 64, `${at}[${i}]`);
    if (text.length === 0) fail(`${at}[${i}]`, 'must not be empty');
    return text;
  });
}

/** A `logit_bias` map: token ids (decimal, from 0) to a number from -100 to 100, at most MAX_LOGIT_BIAS of them. */
export function checkLogitBias(bias: Json, at: string): Record<string, number> {
  const entries = Object.entries(bias);
  if (entries.length > MAX_LOGIT_BIAS) fail(at, `at most ${MAX_LOGIT_BIAS} tokens, got ${entries.length}`);
  for (const [token, value] of entries) {
    if (!/^(0|[1-9][0-9]{0,9})$/.test(token))
      fail(at, `keys are token ids (integers from 0 as strings), got ${JSON.stringify(token.slice(0, 32))}`);
    optionalNumber(value, `${at}.${token}`, -100, 100);
    if (value === null || value === undefined) fail(`${at}.${token}`, 'must be a number from -100 to 100');
  }
  return bias as Record<string, number>;
}
