import { CortexError } from '../errors/error-codes.js';
import { array, integer, number, object, oneOf, string } from '../fields.js';

/** What a catalogue model serves: chat models generate; embedding and ranking models only read. */
export const MODEL_KINDS = ['chat', 'embedding', 'ranking'] as const;
export type ModelKind = (typeof MODEL_KINDS)[number];

/** The HTTP APIs of the read-only kinds, as request-finished events and metrics name them. */
export const RETRIEVAL_APIS = ['openai.embeddings', 'rerank'] as const;
export type RetrievalApi = (typeof RETRIEVAL_APIS)[number];

const SERVES: Record<ModelKind, string> = {
  chat: 'chat (/v1/chat/completions, /v1/responses, /v1/messages)',
  embedding: 'embeddings (/v1/embeddings)',
  ranking: 'reranking (/v1/rerank)',
};

/** A request for `wanted` on a model of another kind: a 400 naming the model and what it does serve. */
export function assertModelKind(model: string, kind: ModelKind, wanted: ModelKind): void {
  if (kind === wanted) return;
  throw new CortexError(
    'invalid_request',
    `the model '${model}' is ${kind === 'chat' ? 'a chat' : `an ${kind}`} model: it serves ` +
      `${SERVES[kind]}, not ${SERVES[wanted]}; pick a model of that kind from /v1/models`,
    { param: 'model' },
  );
}

/** One input: text, or token ids of the model's vocabulary. */
export type RetrievalInput = string | number[];

/** gateway → worker: embed these inputs, one vector each, in order. */
export interface EmbedCommand {
  /** The gateway's run id: a cancel for it stops the work between inputs. */
  runId: string;
  model: string;
  inputs: RetrievalInput[];
}

/** worker → gateway: unit-length vectors in input order. */
export interface EmbedResult {
  model: string;
  workerId: string;
  embeddings: number[][];
  promptTokens: number;
}

/** gateway → worker: score each document's relevance to the query. */
export interface RankCommand {
  runId: string;
  model: string;
  query: string;
  documents: string[];
}

/** worker → gateway: a score in [0, 1] per document, in document order. */
export interface RankResult {
  model: string;
  workerId: string;
  scores: number[];
  promptTokens: number;
}

function input(value: unknown, param: string): RetrievalInput {
  return typeof value === 'string' ? value : array(value, param).map((token, i) => integer(token, `${param}[${i}]`, 0));
}

export function decodeEmbedCommand(value: unknown): EmbedCommand {
  const command = object(value, 'embed');
  return {
    runId: string(command.runId, 'runId'),
    model: string(command.model, 'model'),
    inputs: array(command.inputs, 'inputs').map((item, i) => input(item, `inputs[${i}]`)),
  };
}

export function decodeEmbedResult(value: unknown): EmbedResult {
  const result = object(value, 'embedResult');
  return {
    model: string(result.model, 'model'),
    workerId: string(result.workerId, 'workerId'),
    embeddings: array(result.embeddings, 'embeddings').map((v, i) =>
      array(v, `embeddings[${i}]`).map((x, j) => number(x, `embeddings[${i}][${j}]`)),
    ),
    promptTokens: integer(result.promptTokens, 'promptTokens', 0),
  };
}

export function decodeRankCommand(value: unknown): RankCommand {
  const command = object(value, 'rank');
  return {
    runId: string(command.runId, 'runId'),
    model: string(command.model, 'model'),
    query: string(command.query, 'query'),
    documents: array(command.documents, 'documents').map((d, i) => string(d, `documents[${i}]`)),
  };
}

export function decodeRankResult(value: unknown): RankResult {
  const result = object(value, 'rankResult');
  return {
    model: string(result.model, 'model'),
    workerId: string(result.workerId, 'workerId'),
    scores: array(result.scores, 'scores').map((s, i) => number(s, `scores[${i}]`)),
    promptTokens: integer(result.promptTokens, 'promptTokens', 0),
  };
}

/** A model kind from the bus (absent: chat, what every model was before kinds). */
export function modelKindOf(value: unknown, param: string): ModelKind {
  return value === undefined ? 'chat' : oneOf(value, param, MODEL_KINDS);
}

/** The vector scaled to length 1 (all zeros stays zeros): embeddings go out as unit vectors, as OpenAI's do. */
export function unitLength(vector: readonly number[]): number[] {
  const norm = Math.sqrt(vector.reduce((sum, x) => sum + x * x, 0));
  return norm > 0 ? vector.map((x) => x / norm) : [...vector];
}
