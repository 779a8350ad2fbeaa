import type { LlamaModel } from 'node-llama-cpp';
import { CortexError, type CanonicalRequest } from '@cortex/contracts';

/**
 * Characters tokenized at a time. llama.cpp's SentencePiece tokenizer slows down with the square of a
 * run's length: 1.5 M repeated characters took 6.6 minutes on one call (100 k: 0.75 s), all of it on
 * the worker's event loop, so no heartbeat, cancel or other stream moves meanwhile. On the fixture's
 * tokenizer 4,096 repeated characters take 2.5 ms, 1,024 about a sixteenth of that: smaller chunks
 * cost less in all and hold the event loop for less at a time.
 */
const CHUNK_CHARS = 256;
/** A run without white space longer than this is counted in chunks first, whatever the prompt's size (see hasLongRun). */
const LONG_RUN_CHARS = 4_096;
/** Chunks counted between two turns of the event loop in the asynchronous count: about a millisecond of work at most. */
const CHUNKS_PER_TURN = 4;
/**
 * Above this many bytes of text per token of context a prompt is counted in chunks first; under it,
 * it is tokenized once, whole, and its exact length checked. Real vocabularies average 3-5 bytes per
 * token on prose and code (the fixtures 3.6), so a prompt that fits is rarely counted twice, and the
 * longest run tokenized whole stays near 4 bytes per token of context (128 KB at 32k: about a second
 * for one repeated character, by the quadratic cost measured above).
 */
export const PLAUSIBLE_BYTES_PER_TOKEN = 4;
/** Tokens a chunk boundary may add (a piece split in two, a space prefix): the count stays a lower bound. */
const BOUNDARY_SLACK = 2;

/**
 * For a prompt whose text is far longer than the context could hold at a plausible bytes per
 * token, or that has a long run without white space, a chunked lower bound of its length once that
 * passes the context; otherwise null, and the caller tokenizes it whole. Whole tokenizing is
 * quadratic on long runs (1.5 MB of one character took minutes of the event loop; 131 KB, under the
 * bytes bound of a 32k context, 0.4 s a try), and counting first would tokenize ordinary prompts
 * twice. A prompt counted and found to fit holds fewer tokens than the context, which bounds what
 * its whole tokenizing costs.
 */
export function tokensIfOverContext(model: LlamaModel, request: CanonicalRequest, contextSize: number): number | null {
  if (!countFirst(request, contextSize)) return null;
  const atLeast = promptTokensAtLeast(model, request, contextSize);
  return atLeast >= contextSize ? atLeast : null;
}

/** As tokensIfOverContext, counting with turns of the event loop between chunks (a generation's path). */
export async function tokensIfOverContextAsync(
  model: LlamaModel,
  request: CanonicalRequest,
  contextSize: number,
): Promise<number | null> {
  if (!countFirst(request, contextSize)) return null;
  const atLeast = await promptTokensAtLeastAsync(model, request, contextSize);
  return atLeast >= contextSize ? atLeast : null;
}

function countFirst(request: CanonicalRequest, contextSize: number): boolean {
  const bytes = promptBytes(request);
  if (bytes <= contextSize) return false;
  return bytes > contextSize * PLAUSIBLE_BYTES_PER_TOKEN || hasLongRun(request);
}

/**
 * A lower bound of the request's prompt length in tokens, counted chunk by chunk and only until it
 * reaches `limit`: a prompt far over the context is refused after a few chunks instead of being
 * tokenized whole. Returns a number below `limit` when the texts may fit.
 */
export function promptTokensAtLeast(model: LlamaModel, request: CanonicalRequest, limit: number): number {
  return textsTokensAtLeast(model, promptTexts(request), limit);
}

/**
 * As promptTokensAtLeast, letting the event loop turn every few chunks: ten such prompts at once
 * (a client's attack) then take turns with the worker's other requests, heartbeats and streams
 * instead of holding them for the whole count (an honest chat's median rose 15× meanwhile).
 */
export async function promptTokensAtLeastAsync(
  model: LlamaModel,
  request: CanonicalRequest,
  limit: number,
): Promise<number> {
  let count = 0;
  let chunks = 0;
  for (count of countChunks(model, promptTexts(request), limit)) {
    if (++chunks % CHUNKS_PER_TURN === 0) await new Promise((turn) => setImmediate(turn));
  }
  return count;
}

/** As promptTokensAtLeast, for any texts (an input to embed, a query and a document to rank). */
export function textsTokensAtLeast(model: LlamaModel, texts: Iterable<string>, limit: number): number {
  let count = 0;
  for (count of countChunks(model, texts, limit));
  return count;
}

/** The running count after each chunk, until it reaches `limit` or the texts end. */
function* countChunks(model: LlamaModel, texts: Iterable<string>, limit: number): Generator<number> {
  let count = 0;
  yield count;
  for (const text of texts) {
    for (let at = 0; at < text.length; at += CHUNK_CHARS) {
      count += Math.max(0, model.tokenize(text.slice(at, at + CHUNK_CHARS)).length - BOUNDARY_SLACK);
      yield count;
      if (count >= limit) return;
    }
  }
}

/**
 * Whether any text of the prompt has a run of more than LONG_RUN_CHARS characters without white space:
 * the one shape whose whole tokenizing is quadratic (131 KB of one character took 0.4 s on the
 * fixture's tokenizer, against 24 ms for 128 KB of words), so it is counted in chunks first whatever
 * its size. One pass over the characters.
 */
export function hasLongRun(request: CanonicalRequest): boolean {
  for (const text of promptTexts(request)) {
    if (text.length <= LONG_RUN_CHARS) continue;
    let run = 0;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      run = c === 0x20 || c === 0x0a || c === 0x09 || c === 0x0d ? 0 : run + 1;
      if (run > LONG_RUN_CHARS) return true;
    }
  }
  return false;
}

/** The UTF-8 size of every text the prompt is made of (a token is at least one byte). */
export function promptBytes(request: CanonicalRequest): number {
  let bytes = 0;
  for (const text of promptTexts(request)) bytes += Buffer.byteLength(text);
  return bytes;
}

function* promptTexts(request: CanonicalRequest): Iterable<string> {
  if (request.raw?.text) yield request.raw.text;
  if (request.raw?.suffix) yield request.raw.suffix;
  if (request.prefill) yield request.prefill;
  for (const message of request.messages) {
    yield message.content;
    if (message.reasoning) yield message.reasoning;
    for (const call of message.toolCalls ?? []) yield call.arguments;
  }
  for (const tool of request.tools ?? []) {
    if (tool.description) yield tool.description;
    if (tool.parameters) yield JSON.stringify(tool.parameters);
  }
}

/**
 * The error for a prompt its context cannot hold (the output needs a token of room), both engines
 * alike: `atLeast` where the count stopped at a lower bound (see promptTokensAtLeast), `images` where
 * it counts the images' embeddings; `param` is the field to shorten.
 */
export function promptTooLong(prompt: {
  model: string;
  tokens: number;
  contextSize: number;
  param: 'prompt' | 'messages';
  atLeast?: boolean;
  images?: boolean;
}): CortexError {
  const { model, tokens, contextSize, param, atLeast = false, images = false } = prompt;
  return new CortexError(
    'invalid_request',
    `the prompt is ${atLeast ? 'at least ' : ''}${tokens} tokens${images ? ' (images included)' : ''} ` +
      `but ${model} has a context of ${contextSize}; shorten the ${param}${images ? ' or send fewer images' : ''}`,
    { param },
  );
}
