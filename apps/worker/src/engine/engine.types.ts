import type {
  CanonicalRequest,
  ModelCapabilities,
  ModelFacts,
  ModelKind,
  PromptCacheTier,
  RequestPriority,
  Resume,
  RetrievalInput,
  StreamEventBody,
  UpstreamSpec,
  UnreachableUpstream,
} from '@cortex/contracts';
import type { QueueOrder } from './slot-pool.js';
import type { ResolveOptions } from './resolve-source.js';

/** What the worker needs from an inference backend; node-llama-cpp sits behind it in `llama-engine.ts`. */
export interface Engine {
  /** A catalogue `file` → a local GGUF path, downloading a remote one (see resolve-source). */
  resolveSource(source: string, options: ResolveOptions): Promise<string>;
  readonly backend: string;
  device(): Promise<{ name: string; kind: string; totalBytes: number; freeBytes: number }>;
  /**
   * Bytes of device memory (VRAM on a GPU, RAM on CPU) a model and its context will take, from the
   * GGUF header; `path` may be a URL or `hf:` URI, whose header is read with range requests.
   */
  estimate(spec: Pick<ModelSpec, 'path' | 'contextSize' | 'slots' | 'kind' | 'mmproj'>): Promise<number>;
  /** What the GGUF header (local, or remote as in `estimate`) says of the model. */
  facts(path: string): Promise<ModelFacts>;
  /** `signal` stops the load part-way (node-llama-cpp's `loadSignal`); the promise then rejects. */
  load(spec: ModelSpec, onProgress?: (fraction: number) => void, signal?: AbortSignal): Promise<EngineModel>;
  /**
   * Disposes the backend and creates it anew (defragmentation): device memory fragmented by many
   * load/unload cycles is returned whole. Every model must be disposed first.
   */
  restart(): Promise<void>;
  dispose(): Promise<void>;
  /** What the prompt cache beyond the slots holds now and may hold, in bytes, per tier; absent or empty without one. */
  promptCacheUse?(): PromptCacheTier[];
}

export interface ModelSpec {
  id: string;
  /** Resolved local GGUF path. */
  path: string;
  contextSize: number;
  slots: number;
  maxQueue: number;
  /** How waiting requests are ordered (`worker.queue_order`); `fair` when absent. */
  queueOrder?: QueueOrder;
  /**
   * How a free sequence is chosen for a prompt (see slot-choice.decider.ts); `similar` when absent, `longest` is the
   * benchmark's baseline.
   */
  slotChoice?: 'similar' | 'longest';
  /** False: this model keeps no prompt beyond its slots, whatever the worker's prompt cache (the benchmark's arms). */
  keepPrompts?: boolean;
  /** Speculative decoding: the draft model's resolved local path, or `lookup` for input lookup. */
  draft?: string;
  /** Absent: chat. */
  kind?: ModelKind;
  /** The catalogue's chat template, for a GGUF whose own is missing or broken (`chat_template`). */
  chatTemplate?: string;
  /** The catalogue's output format, where the template's fingerprint is not enough (`format`). */
  format?: string;
  /** A vision model's projector (the catalogue's `mmproj`), resolved to a local path: only the vision engine loads one. */
  mmproj?: string;
  /** Served from this upstream instead of a GGUF (`path` is then its URL): only the remote engine loads one. */
  upstream?: UpstreamSpec;
}

/**
 * What an engine emits for one run: the stream's events, with the run's start as the engine knows it
 * (the worker adds the run's and its own ids: see RunEvents).
 */
export type EngineEvent =
  Exclude<StreamEventBody, { type: 'start' }> | Omit<Extract<StreamEventBody, { type: 'start' }>, 'runId' | 'workerId'>;

export interface GenerateJob {
  request: CanonicalRequest;
  /** When the generate command arrived (performance.now()), for TTFT and queue time. */
  receivedAt: number;
  signal: AbortSignal;
  /** Its tier and account in the model's queue; absent: the lowest tier. */
  priority?: RequestPriority;
  emit: (event: EngineEvent) => void;
  /** A stream migrated from a lost worker: go on after these delivered tokens. */
  resume?: Resume;
  /** Logs a warning about this request (a tool call returned although its arguments miss the schema). */
  warn?: (message: string) => void;
}

export interface EngineModel {
  readonly id: string;
  readonly sizeBytes: number;
  readonly slots: number;
  readonly inFlight: number;
  readonly queued: number;
  /** How it writes reasoning and calls, and how that was chosen (`hermes (the template's fingerprint)`); null without chat output. */
  readonly format: string | null;
  readonly capabilities: ModelCapabilities;
  /** A model served by an upstream that does not answer now: since when, and why (see UpstreamClient). */
  readonly unreachable?: UnreachableUpstream | null;
  /**
   * Prompt tokens of a request as this model's template and tokenizer render it, images included; the
   * vision engine's tokenizer answers asynchronously.
   */
  countTokens(request: CanonicalRequest): number | Promise<number>;
  /** Runs one request to its end, emitting start, deltas and exactly one finish or error. */
  generate(job: GenerateJob): Promise<void>;
  dispose(): Promise<void>;
}

/** What an embedding or ranking model does instead of generating. */
export interface RetrievalModel {
  readonly kind: Exclude<ModelKind, 'chat'>;
  /** Unit-length vectors in input order, and the tokens evaluated. */
  embed(inputs: readonly RetrievalInput[], signal: AbortSignal): Promise<{ vectors: number[][]; tokens: number }>;
  /** A score in [0, 1] per document, and the tokens evaluated. */
  rank(query: string, documents: readonly string[], signal: AbortSignal): Promise<{ scores: number[]; tokens: number }>;
}

export function isRetrievalModel(model: EngineModel): model is EngineModel & RetrievalModel {
  return 'embed' in model && 'rank' in model;
}
