import type { LlamaEmbeddingContext, LlamaModel, LlamaRankingContext, Token } from 'node-llama-cpp';
import {
  CortexError,
  unitLength,
  type ModelCapabilities,
  type ModelKind,
  type RetrievalInput,
} from '@cortex/contracts';
import type { EngineModel, ModelSpec, RetrievalModel } from './engine.types.js';
import { PLAUSIBLE_BYTES_PER_TOKEN, textsTokensAtLeast } from './prompt-bound.js';
import { SlotPool } from './slot-pool.js';
import { vocabularySize } from './vocabulary.js';

type RetrievalContext = LlamaEmbeddingContext | LlamaRankingContext;

/**
 * An embedding or ranking model: `slots` contexts of its kind (node-llama-cpp's LlamaEmbeddingContext
 * or LlamaRankingContext, one sequence each). A request takes one context and evaluates its inputs
 * there in order; requests in parallel take other contexts, and past them wait in the bounded queue.
 * Inputs are all checked (token ids, context size) before any is evaluated.
 */
export class RetrievalEngineModel implements EngineModel, RetrievalModel {
  readonly id: string;
  readonly slots: number;
  readonly kind: Exclude<ModelKind, 'chat'>;
  readonly format = null;
  readonly capabilities: ModelCapabilities = { tools: false, reasoning: false, vision: false };
  private readonly pool: SlotPool<RetrievalContext>;
  private readonly vocabularySize: number;
  private readonly contextSize: number;

  constructor(
    spec: ModelSpec,
    private readonly model: LlamaModel,
    private readonly contexts: readonly RetrievalContext[],
  ) {
    this.id = spec.id;
    this.slots = contexts.length;
    this.contextSize = spec.contextSize;
    this.kind = spec.kind === 'ranking' ? 'ranking' : 'embedding';
    this.pool = new SlotPool([...contexts], spec.maxQueue);
    this.vocabularySize = vocabularySize(model) ?? 0;
  }

  /** Creates the model's `slots` contexts of its kind; a context that fails takes the others with it. */
  static async create(spec: ModelSpec, model: LlamaModel, threads: number): Promise<RetrievalEngineModel> {
    const contexts: RetrievalContext[] = [];
    try {
      for (let i = 0; i < spec.slots; i++) {
        // One batch as large as the context: pooling (mean, CLS, rank) needs the whole input in one batch.
        const options = { contextSize: spec.contextSize, batchSize: spec.contextSize, threads };
        contexts.push(
          spec.kind === 'ranking'
            ? await model.createRankingContext(options)
            : await model.createEmbeddingContext(options),
        );
      }
    } catch (error) {
      await Promise.allSettled(contexts.map((c) => c.dispose()));
      throw error;
    }
    return new RetrievalEngineModel(spec, model, contexts);
  }

  get sizeBytes(): number {
    return this.model.size;
  }

  get inFlight(): number {
    return this.pool.inUse;
  }

  get queued(): number {
    return this.pool.queued;
  }

  countTokens(): number {
    throw this.notChat();
  }

  generate(): Promise<void> {
    return Promise.reject(this.notChat());
  }

  private notChat(): CortexError {
    return new CortexError(
      'invalid_request',
      `the model '${this.id}' is an ${this.kind} model and does not generate ` +
        `text; use /v1/${this.kind === 'ranking' ? 'rerank' : 'embeddings'}`,
      { param: 'model' },
    );
  }

  /** Unit-length vectors, one per input, and the tokens evaluated. */
  async embed(
    inputs: readonly RetrievalInput[],
    signal: AbortSignal,
  ): Promise<{ vectors: number[][]; tokens: number }> {
    if (this.kind !== 'embedding') throw this.wrongKind('embedding');
    const resolved = inputs.map((input, i) => this.resolve(input, `input[${i}]`));
    return this.withContext(signal, async (context) => {
      const embedder = context as LlamaEmbeddingContext;
      let tokens = 0;
      resolved.forEach((input, i) => {
        tokens += this.lengthOf(
          typeof input === 'string' ? [input] : [],
          () => embedder.calculateInputLength(input),
          `input[${i}]`,
        );
      });
      const vectors: number[][] = [];
      for (const input of resolved) {
        signal.throwIfAborted();
        vectors.push(unitLength((await embedder.getEmbeddingFor(input)).vector));
      }
      return { vectors, tokens };
    });
  }

  /** A relevance score in [0, 1] per document, and the tokens evaluated. */
  async rank(
    query: string,
    documents: readonly string[],
    signal: AbortSignal,
  ): Promise<{ scores: number[]; tokens: number }> {
    if (this.kind !== 'ranking') throw this.wrongKind('ranking');
    return this.withContext(signal, async (context) => {
      const ranker = context as LlamaRankingContext;
      let tokens = 0;
      documents.forEach((document, i) => {
        tokens += this.lengthOf(
          [query, document],
          () => ranker.calculateInputLength(query, document),
          `documents[${i}]`,
        );
      });
      const scores: number[] = [];
      for (const document of documents) {
        signal.throwIfAborted();
        scores.push(await ranker.rank(query, document));
      }
      return { scores, tokens };
    });
  }

  private async withContext<T>(signal: AbortSignal, run: (context: RetrievalContext) => Promise<T>): Promise<T> {
    const context = await this.pool.acquire(signal);
    try {
      return await run(context);
    } finally {
      this.pool.release(context);
    }
  }

  /** Text as is; token ids only when each is in the vocabulary (an id past it would crash llama.cpp). */
  private resolve(input: RetrievalInput, param: string): string | Token[] {
    if (typeof input === 'string') return input;
    const bad = input.findIndex((id) => !Number.isInteger(id) || id < 0 || id >= this.vocabularySize);
    if (bad !== -1) {
      throw new CortexError(
        'invalid_request',
        `${param}[${bad}]: token id ${input[bad]} is not in ${this.id}'s vocabulary of ${this.vocabularySize} tokens`,
        { param: `${param}[${bad}]` },
      );
    }
    return input as Token[];
  }

  /**
   * An input's length in tokens, refused past the context. Text far longer than the context could hold
   * is counted in chunks first (prompt-bound.ts: tokenizing a long run whole is quadratic and blocks
   * the worker's event loop), and refused as soon as the count passes the context.
   */
  private lengthOf(texts: string[], exact: () => number, param: string): number {
    const bytes = texts.reduce((sum, text) => sum + Buffer.byteLength(text), 0);
    const atLeast =
      bytes > this.contextSize * PLAUSIBLE_BYTES_PER_TOKEN
        ? textsTokensAtLeast(this.model, texts, this.contextSize)
        : 0;
    const length = atLeast >= this.contextSize ? atLeast : exact();
    if (length >= this.contextSize) {
      const size = atLeast >= this.contextSize ? `at least ${length}` : `${length}`;
      throw new CortexError(
        'invalid_request',
        `${param} is ${size} tokens but ${this.id} has a context of ${this.contextSize}; shorten it or split it`,
        { param },
      );
    }
    return length;
  }

  private wrongKind(wanted: string): CortexError {
    return new CortexError(
      'invalid_request',
      `the model '${this.id}' is an ${this.kind} model, not an ${wanted} model`,
      { param: 'model' },
    );
  }

  async dispose(): Promise<void> {
    await Promise.allSettled(this.contexts.map((c) => c.dispose()));
    await this.model.dispose();
  }
}
