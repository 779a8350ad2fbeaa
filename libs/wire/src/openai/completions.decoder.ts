import {
  array,
  defined,
  fail,
  integer,
  modelName,
  object,
  optionalBoolean,
  optionalInteger,
  optionalNumber,
  optionalString,
  stopSequences,
  type CanonicalRequest,
  type Json,
  type RawPrompt,
} from '@cortex/contracts';
import { samplingExtensions } from '../sampling-extensions.js';

/** Choices one `/v1/completions` request may ask for: prompts in an array prompt times `n`. */
export const MAX_COMPLETION_PROMPTS = 16;

/**
 * The prompts of a legacy completion body, one per choice: a string, an array of token ids, or an
 * array of either. Anything else, or more than MAX_COMPLETION_PROMPTS, throws naming `prompt`.
 */
export function completionPrompts(value: unknown): Array<string | number[]> {
  if (typeof value === 'string') return [value];
  const items = array(value, 'prompt');
  if (items.length === 0) fail('prompt', 'must not be empty');
  // An array of numbers is one prompt as token ids.
  if (items.every((item) => typeof item === 'number')) return [tokenIds(items, 'prompt')];
  if (items.length > MAX_COMPLETION_PROMPTS)
    fail('prompt', `at most ${MAX_COMPLETION_PROMPTS} prompts in one request, got ${items.length}`);
  return items.map((item, i) => {
    if (typeof item === 'string') return item;
    if (Array.isArray(item)) return tokenIds(item, `prompt[${i}]`);
    return fail(`prompt[${i}]`, 'must be a string or an array of token ids');
  });
}

/**
 * One entry per choice of a completion body: each prompt `n` times, in OpenAI's order (the choices
 * of the first prompt first). Throws naming `prompt` or `n`, also past MAX_COMPLETION_PROMPTS.
 */
export function completionChoices(body: Json): Array<string | number[]> {
  const prompts = completionPrompts(body.prompt);
  const n = optionalInteger(body.n, 'n', 1, MAX_COMPLETION_PROMPTS) ?? 1;
  if (prompts.length * n > MAX_COMPLETION_PROMPTS) {
    fail(
      'n',
      `${prompts.length} prompts × n=${n} is ${prompts.length * n} choices; at most ${MAX_COMPLETION_PROMPTS} in one request`,
    );
  }
  return prompts.flatMap((prompt) => Array.from({ length: n }, () => prompt));
}

function tokenIds(items: unknown[], param: string): number[] {
  if (items.length === 0) fail(param, 'must not be empty');
  return items.map((token, i) => integer(token, `${param}[${i}]`, 0));
}

/**
 * One legacy OpenAI completion body (`/v1/completions`) with a single choice → canonical request
 * with a raw prompt (no chat template). A body with several choices (an array prompt, `n`) is split
 * by the gateway first, one request per choice. Throws `invalid_request` naming the field.
 */
export function decodeCompletionRequest(input: unknown): CanonicalRequest {
  const body = object(input, 'body');
  const model = modelName(body.model);
  const choices = completionChoices(body);
  if (choices.length !== 1)
    fail(
      body.n === undefined || body.n === 1 ? 'prompt' : 'n',
      `send one prompt with n=1 per request here, got ${choices.length} choices`,
    );
  const prompt = choices[0] as string | number[];
  refuseUnserved(body);
  const raw: RawPrompt = typeof prompt === 'string' ? { text: prompt } : { tokens: prompt };
  const suffix = optionalString(body.suffix, 'suffix');
  if (suffix !== undefined && suffix !== '') raw.suffix = suffix;
  if (optionalBoolean(body.echo, 'echo')) raw.echo = true;
  const stream = optionalBoolean(body.stream, 'stream') ?? false;
  const logprobs = decodeLogprobs(body);
  const request: CanonicalRequest = {
    model,
    messages: [],
    raw,
    ...(logprobs !== undefined && { logprobs }),
    sampling: defined({
      temperature: optionalNumber(body.temperature, 'temperature', 0, 2),
      topP: optionalNumber(body.top_p, 'top_p', 0, 1),
      seed: optionalInteger(body.seed, 'seed', Number.MIN_SAFE_INTEGER),
      // OpenAI's default for this API is 16 tokens.
      // 0 only with echo: the prompt alone (with its log-probabilities, lm-evaluation-harness's loglikelihood).
      maxTokens: optionalInteger(body.max_tokens, 'max_tokens', raw.echo ? 0 : 1) ?? 16,
      presencePenalty: optionalNumber(body.presence_penalty, 'presence_penalty', -2, 2),
      frequencyPenalty: optionalNumber(body.frequency_penalty, 'frequency_penalty', -2, 2),
      stop: stopSequences(body.stop, 'stop', { single: true }),
      ...samplingExtensions(body),
    }),
    stream,
  };
  if (body.stream_options !== undefined && body.stream_options !== null) {
    const options = object(body.stream_options, 'stream_options');
    if (!stream) fail('stream_options', 'is only allowed when stream is true');
    request.includeUsage = optionalBoolean(options.include_usage, 'stream_options.include_usage') ?? false;
  }
  return request;
}

/** Options this API has that cortex does not serve: a 400 naming each rather than a silent difference. */
function refuseUnserved(body: Json): void {
  const bestOf = optionalInteger(body.best_of, 'best_of', 1);
  if (bestOf !== undefined && bestOf !== 1) fail('best_of', 'only best_of=1 is supported');
}

/** `logprobs`: how many of the likeliest tokens to list at each step (0: the generated token's alone). */
function decodeLogprobs(body: Json): number | undefined {
  const top = optionalInteger(body.logprobs, 'logprobs', 0, 20);
  if (
    top !== undefined &&
    body.echo === true &&
    body.suffix !== undefined &&
    body.suffix !== null &&
    body.suffix !== ''
  ) {
    fail(
      'suffix',
      'echo with logprobs gives the log-probabilities of the prompt as sent; a ' +
        'fill-in-the-middle prompt is rearranged around its suffix: leave suffix out, or echo',
    );
  }
  return top;
}
