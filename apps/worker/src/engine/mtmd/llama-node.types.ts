import { createRequire } from 'node:module';

/*
 * The part of @fugood/llama.node (1.7.15) the vision engine uses, typed here: the package ships its
 * TypeScript sources rather than declarations, and only this folder may touch it. The library is
 * loaded on first use, so a worker without a vision model never maps its binary.
 */

export type LibVariant = 'default' | 'cuda' | 'vulkan';

/** A message as llama.cpp's chat templates read it (OpenAI's shape): tool calls and results included. */
export interface LlamaNodeMessage {
  role: string;
  content: string;
  reasoning_content?: string;
  tool_calls?: Array<{ type: 'function'; id: string; function: { name: string; arguments: string } }>;
  tool_call_id?: string;
  name?: string;
}

export interface LlamaNodeTool {
  type: 'function';
  function: { name: string; description: string; parameters: Record<string, unknown> };
}

export interface LlamaNodeTokenizeResult {
  /** -1 stands for each position an image's embeddings take. */
  tokens: Int32Array;
  has_media: boolean;
  bitmap_hashes: string[];
  chunk_pos: number[];
  chunk_pos_media: number[];
}

export interface LlamaNodeFormattedChat {
  type: 'jinja' | 'llama-chat';
  prompt: string;
  additional_stops?: string[];
}

export interface LlamaNodeCompletionOptions {
  prompt: string;
  media_paths?: string[];
  n_predict?: number;
  temperature?: number;
  top_k?: number;
  top_p?: number;
  min_p?: number;
  seed?: number;
  stop?: string[];
  penalty_last_n?: number;
  penalty_repeat?: number;
  penalty_freq?: number;
  penalty_present?: number;
  xtc_probability?: number;
  xtc_threshold?: number;
  dry_multiplier?: number;
  dry_base?: number;
  dry_allowed_length?: number;
  dry_penalty_last_n?: number;
  dry_sequence_breakers?: string[];
}

export interface LlamaNodeParallelResult {
  text: string;
  stopped_eos: boolean;
  stopped_limit: boolean;
  stopped_word: boolean;
  context_full: boolean;
  tokens_predicted: number;
  timings: { cache_n: number; prompt_n: number; prompt_ms: number; predicted_n: number; predicted_ms: number };
}

export interface LlamaNodeContext {
  parallel: {
    enable(config: { n_parallel: number; n_batch: number }): Promise<boolean>;
    disable(): void;
    completion(
      options: LlamaNodeCompletionOptions,
      onToken?: (requestId: number, data: { token: string }) => void,
    ): Promise<{ requestId: number; promise: Promise<LlamaNodeParallelResult>; stop: () => void }>;
  };
  getFormattedChat(
    messages: LlamaNodeMessage[],
    template?: string,
    params?: {
      jinja?: boolean;
      add_generation_prompt?: boolean;
      tools?: LlamaNodeTool[];
      chat_template_kwargs?: Record<string, unknown>;
    },
  ): LlamaNodeFormattedChat;
  tokenize(text: string, options?: { media_paths?: string[] }): Promise<LlamaNodeTokenizeResult>;
  initMultimodal(options: { path: string; use_gpu: boolean }): boolean;
  getMultimodalSupport(): { vision: boolean; audio: boolean };
  releaseMultimodal(): void;
  getUsedDevices(): string[];
  release(): Promise<void>;
}

export interface LlamaNodeModelOptions {
  model: string;
  n_ctx: number;
  n_batch: number;
  n_threads: number;
  n_gpu_layers: number;
  n_parallel: number;
  lib_variant: LibVariant;
  chat_template?: string;
}

export interface LlamaNode {
  loadModel(options: LlamaNodeModelOptions, onProgress?: (fraction: number) => void): Promise<LlamaNodeContext>;
  isLibVariantAvailable(variant: LibVariant): Promise<boolean>;
  getBackendDevicesInfo(
    variant?: LibVariant,
  ): Promise<Array<{ backend: string; type: string; deviceName: string; maxMemorySize: number }>>;
  BuildInfo: { number: string; commit: string };
}

/** The marker llama.cpp's mtmd replaces with the next image's embeddings, wherever it stands in a prompt. */
export const MEDIA_MARKER = '<__media__>';

let library: LlamaNode | null = null;

/** The library, loaded once; a missing or broken install throws the loader's error. */
export function llamaNode(): LlamaNode {
  library ??= createRequire(import.meta.url)('@fugood/llama.node') as LlamaNode;
  return library;
}
