import {
  getLlama,
  GgufFileType,
  GgufInsights,
  JinjaTemplateChatWrapper,
  LlamaLogLevel,
  readGgufFileInfo,
  resolveChatWrapper,
  type ChatWrapper,
  type GgufFileInfo,
  type Llama,
  type LlamaGpuType,
  type LlamaContext,
  type LlamaModel,
} from 'node-llama-cpp';
import { statSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import type { ModelFacts, PromptCacheTier } from '@cortex/contracts';
import type { Engine, EngineModel, ModelSpec } from './engine.types.js';
import { RetrievalEngineModel } from './embed.js';
import { LlamaEngineModel, type ModelDialect } from './llama-model.js';
import { chooseFormat } from './formats/choose-format.js';
import { fingerprint } from './formats/families.js';
import { formatCapabilities } from './formats/format-capabilities.js';
import { TemplatePrompt } from './formats/template-prompt.js';
import { memoAsync } from './memo.js';
import { remoteSizes } from './model-download.js';
import { isRemote, remoteSource } from './model-source.js';
import { resolveSource, type ResolveOptions } from './resolve-source.js';
import { draftSpeculation, inputLookup, type Speculation } from './speculative.js';
import { NativeGarbage } from './native-garbage.js';
import { headerVocabulary, vocabulary } from './vocabulary.js';
import { PromptCache, type PromptCacheOptions } from './prompt-cache.js';
import { ggufSamplingDefaults } from './sampling-defaults.js';

export interface LlamaEngineOptions {
  gpu: 'auto' | 'cuda' | 'vulkan' | 'metal' | 'cpu';
  /**
   * 0 = every core but one, which stays free for the event loop, NATS and other services. llama.cpp
   * threads that compete with anything else for a core slow decoding by an order of magnitude.
   */
  threads: number;
  /** Native memory finished generations may leave before a major collection (`worker.native_gc_mb`); 0: never asked. */
  nativeGcBytes?: number;
  /** Conversations' evaluated prompts kept beyond the slots (`worker.prompt_cache_mb`, see PromptCache); absent or 0 bytes: none. */
  promptCache?: PromptCacheOptions;
  log: (line: string) => void;
}

/** Attention heads narrower than this evaluate faster without flash attention on the CPU. */
const SMALL_HEAD_DIM = 32;

/** A GGUF's header as read once per file (see LlamaEngine.headers), with its parts' sizes asked for on first use. */
interface GgufHeader {
  info: GgufFileInfo;
  insights: GgufInsights;
  sizes(): Promise<number[]>;
}

/** The node-llama-cpp backend: one `Llama` instance per worker process (one GPU). */
export class LlamaEngine implements Engine {
  /**
   * How each model file's chat template was resolved. node-llama-cpp compares a Jinja template with
   * every specialized wrapper it knows (~0.6 s on the worker's event loop, stalling other streams), so
   * a model loaded again — after an eviction, a swap, a defragmentation — reuses the answer. A
   * specialized wrapper holds only settings and is reused as is; a Jinja wrapper is bound to its
   * model's tokenizer, so only the decision is kept and the wrapper built again (a few ms).
   */
  private readonly chatWrappers = new Map<string, ChatWrapper | 'jinja'>();
  /**
   * Memory estimates by file (path, size, mtime), context and slots: reading a GGUF header costs tens
   * of milliseconds for a real vocabulary, and a model is estimated again at every reload.
   */
  private readonly estimates = new Map<string, Promise<number>>();
  /**
   * GGUF headers by file (as for estimates) or remote source: a remote header costs a few range
   * requests, once per source for the life of the worker (a hub file under one name does not change
   * in place often enough to ask again at every estimate).
   */
  private readonly headers = new Map<string, Promise<GgufHeader>>();
  /** Device names do not change while the backend lives; asked once, not at every heartbeat. */
  private gpuNames: Promise<string[]> | null = null;
  private readonly garbage: NativeGarbage;
  private readonly promptCache: PromptCache | null;

  private constructor(
    private llama: Llama,
    private readonly threads: number,
    private readonly options: LlamaEngineOptions,
  ) {
    this.garbage = new NativeGarbage(options.nativeGcBytes ?? 0);
    this.promptCache =
      options.promptCache && options.promptCache.maxBytes > 0 ? new PromptCache(options.promptCache) : null;
  }

  static async create(options: LlamaEngineOptions): Promise<LlamaEngine> {
    const threads = options.threads > 0 ? options.threads : Math.max(1, availableParallelism() - 1);
    return new LlamaEngine(await LlamaEngine.backend(options), threads, options);
  }

  private static backend(options: LlamaEngineOptions): Promise<Llama> {
    const gpu: LlamaGpuType | 'auto' = options.gpu === 'cpu' ? false : options.gpu;
    return getLlama({
      gpu,
      logLevel: LlamaLogLevel.warn,
      logger: (level, message) => options.log(`llama.cpp ${level}: ${message.trim()}`),
      // Never compile from source at run time: a worker should start in seconds or say why it cannot.
      build: 'never',
    });
  }

  async restart(): Promise<void> {
    await this.llama.dispose();
    this.llama = await LlamaEngine.backend(this.options);
    this.gpuNames = null;
  }

  resolveSource(source: string, options: ResolveOptions): Promise<string> {
    return resolveSource(source, options);
  }

  get backend(): string {
    return this.llama.gpu === false ? 'cpu' : this.llama.gpu;
  }

  async device(): Promise<{ name: string; kind: string; totalBytes: number; freeBytes: number }> {
    if (this.llama.gpu === false) {
      const ram = await this.llama.getRamState();
      return { name: 'cpu', kind: 'cpu', totalBytes: ram.total, freeBytes: ram.free };
    }
    this.gpuNames ??= this.llama.getGpuDeviceNames();
    const [vram, names] = await Promise.all([this.llama.getVramState(), this.gpuNames]);
    return {
      name: names.join(', ') || this.llama.gpu,
      kind: this.llama.gpu,
      totalBytes: vram.total,
      freeBytes: vram.free,
    };
  }

  estimate(spec: Pick<ModelSpec, 'path' | 'contextSize' | 'slots' | 'kind'>): Promise<number> {
    return memoAsync(
      this.estimates,
      `${fileKey(spec.path)}|${spec.contextSize}|${spec.slots}|${spec.kind ?? 'chat'}`,
      () => this.readEstimate(spec),
    );
  }

  async facts(path: string): Promise<ModelFacts> {
    const header = await this.header(path);
    const { info, insights } = header;
    const general = info.metadata.general;
    const template = info.metadata.tokenizer?.chat_template ?? '';
    const sizes = await header.sizes();
    const sampling = ggufSamplingDefaults(general);
    const parameters = insights.totalParameters;
    const fileType = general.file_type;
    const facts: ModelFacts = {
      architecture: general.architecture,
      ...(parameters > 0 && { parameters }),
      ...(fileType !== undefined && GgufFileType[fileType] && { quantization: GgufFileType[fileType] }),
      ...(sizes.length > 0 && { fileBytes: sizes.reduce((a, b) => a + b, 0) }),
      ...(insights.trainContextSize && { trainedContextLength: insights.trainContextSize }),
      ...(template && { tools: /\btools\b/.test(template), reasoning: /<think>|reasoning/.test(template) }),
      ...(Object.keys(sampling).length > 0 && { sampling }),
    };
    // What a load would choose by the template's text alone (a template that must be rendered to be known is left to the load).
    const known = template ? fingerprint(template) : undefined;
    if (known) {
      const { format, ...writes } = formatCapabilities(known, template, headerVocabulary(info.metadata));
      facts.chatFormat = { id: format, ...writes };
    }
    return facts;
  }

  /** The header of a local GGUF, or of a remote one read with range requests (all parts of a split file). */
  private header(path: string): Promise<GgufHeader> {
    return memoAsync(this.headers, fileKey(path), async () => {
      const remote = remoteSource(path);
      const token = process.env.HF_TOKEN;
      const info = await readGgufFileInfo(remote?.urls[0] ?? path, {
        logWarnings: false,
        ...(token && { tokens: { huggingFace: token } }),
        // Only the metadata and tensor table are read; a remote one in a few range requests, without retrying a refusal for long.
        fetchRetryOptions: { retries: 2, minTimeout: 200, maxTimeout: 1_000 },
      });
      // The parts' sizes are asked for by facts only, not by every estimate: once, and again after a failure.
      let sizes: Promise<number[]> | undefined;
      const partSizes = (): Promise<number[]> => {
        if (!sizes) {
          sizes = remote
            ? remoteSizes(remote, token, path)
            : isRemote(path)
              ? Promise.resolve([])
              : Promise.resolve().then(() => localSizes(info));
          sizes.catch(() => (sizes = undefined));
        }
        return sizes;
      };
      return { info, insights: await GgufInsights.from(info, this.llama), sizes: partSizes };
    });
  }

  /**
   * A chat model has one context with `slots` sequences; an embedding or ranking model has `slots`
   * contexts of one sequence each, every one with its own compute buffers and a batch as large as the
   * context (RetrievalEngineModel), so its context estimate counts `slots` times.
   */
  private async readEstimate(spec: Pick<ModelSpec, 'path' | 'contextSize' | 'slots' | 'kind'>): Promise<number> {
    const { insights } = await this.header(spec.path);
    const gpuLayers = this.llama.gpu === false ? 0 : insights.totalLayers;
    const model = await insights.estimateModelResourceRequirementsV2({ gpuLayers });
    const retrieval = spec.kind === 'embedding' || spec.kind === 'ranking';
    const context = await insights.estimateContextResourceRequirementsV2({
      contextSize: spec.contextSize,
      modelGpuLayers: gpuLayers,
      sequences: retrieval ? 1 : spec.slots,
      ...(retrieval && { isEmbeddingContext: true, batchSize: spec.contextSize }),
    });
    const contexts = retrieval ? spec.slots : 1;
    return this.llama.gpu === false
      ? model.cpuRam + contexts * context.cpuRam
      : model.gpuVram + contexts * context.gpuVram;
  }

  async load(spec: ModelSpec, onProgress?: (fraction: number) => void, signal?: AbortSignal): Promise<EngineModel> {
    const model = await this.llama.loadModel({
      modelPath: spec.path,
      onLoadProgress: onProgress,
      ...(signal && { loadSignal: signal }),
    });
    let speculation: Speculation | null = null;
    try {
      if (spec.kind === 'embedding' || spec.kind === 'ranking')
        return await RetrievalEngineModel.create(spec, model, this.threads);
      const context = await this.createContext(model, spec);
      speculation = spec.draft ? await this.speculation(spec.draft, spec, model) : null;
      return new LlamaEngineModel(
        spec,
        model,
        context,
        this.dialectFor(model, spec),
        speculation,
        this.garbage,
        spec.keepPrompts === false ? null : this.promptCache,
      );
    } catch (error) {
      await speculation?.dispose();
      await model.dispose();
      throw error;
    }
  }

  private createContext(model: LlamaModel, spec: Pick<ModelSpec, 'contextSize' | 'slots'>): Promise<LlamaContext> {
    return model.createContext({
      contextSize: spec.contextSize,
      sequences: spec.slots,
      threads: this.threads,
      ...(this.slowFlashAttention(model) && { flashAttention: false }),
    });
  }

  /** Input lookup, or a draft model loaded with a draft sequence for each of the target's slots. */
  private async speculation(
    draft: string,
    spec: Pick<ModelSpec, 'contextSize' | 'slots'>,
    target: LlamaModel,
  ): Promise<Speculation> {
    if (draft === 'lookup') return inputLookup;
    const model = await this.llama.loadModel({ modelPath: draft });
    try {
      const mismatch = vocabularyMismatch(target, model);
      if (mismatch)
        throw new Error(
          `its draft ${draft} has another tokenizer (${mismatch}); use a draft of the same model family, or draft: lookup`,
        );
      return draftSpeculation(model, await this.createContext(model, spec));
    } catch (error) {
      await model.dispose();
      throw error;
    }
  }

  /**
   * llama.cpp turns flash attention on by itself ("auto") wherever it is supported, the CPU included.
   * Its CPU kernel has a fixed cost per query row and KV cell that small attention heads cannot
   * amortize: with heads of 8 dimensions (the fixtures, stories260K, llama-2-tiny-random) prompt
   * evaluation was 3 to 12 times slower with it than without (docs/benchmarks.md).
   */
  private slowFlashAttention(model: LlamaModel): boolean {
    if (this.llama.gpu !== false) return false;
    const attention = (
      model.fileInfo.architectureMetadata as { attention?: { head_count?: number; key_length?: number } }
    ).attention;
    const headDim =
      attention?.key_length ?? (attention?.head_count ? model.embeddingVectorSize / attention.head_count : undefined);
    return headDim !== undefined && headDim < SMALL_HEAD_DIM;
  }

  /**
   * How the model renders prompts and writes its output: its own chat template (the catalogue's
   * `chat_template` where it gives one) and the format that template teaches (the catalogue's `format`
   * where it names one). A GGUF without a template is rendered by node-llama-cpp's wrapper for it.
   */
  private dialectFor(
    model: LlamaModel,
    spec: Pick<ModelSpec, 'id' | 'path' | 'chatTemplate' | 'format'>,
  ): ModelDialect {
    const source = spec.chatTemplate ?? model.fileInfo.metadata.tokenizer?.chat_template ?? '';
    if (!source) return { prompt: this.chatWrapperFor(model, spec.path), ...chooseFormat(spec, source, null) };
    let template: TemplatePrompt;
    try {
      template = TemplatePrompt.checked(source, model);
    } catch (error) {
      // A template the Jinja engine cannot run: node-llama-cpp's wrapper for the model renders instead.
      const whose = spec.chatTemplate ? "the catalogue's" : 'its';
      this.options.log(
        `${spec.id}: ${whose} chat template cannot be rendered (` +
          `${(error as Error).message}); node-llama-cpp's chat wrapper renders ` +
          'its prompts instead: give the model a chat_template in the catalogue to fix this',
      );
      const { format, chosenBy } = chooseFormat(spec, source, null);
      return {
        prompt: this.chatWrapperFor(model, spec.path),
        format,
        chosenBy: `${chosenBy}, rendered by node-llama-cpp's wrapper`,
      };
    }
    return { prompt: template, ...chooseFormat(spec, source, (messages, tools) => template.probe(messages, tools)) };
  }

  private chatWrapperFor(model: LlamaModel, path: string): ChatWrapper {
    const template = model.fileInfo.metadata.tokenizer?.chat_template ?? '';
    const key = `${path}\n${template}`;
    const known = this.chatWrappers.get(key);
    if (known === 'jinja') {
      return (
        resolveChatWrapper({
          type: 'jinjaTemplate',
          bosString: model.tokens.bosString,
          filename: model.filename,
          fileInfo: model.fileInfo,
          tokenizer: model.tokenizer,
        }) ?? resolveChatWrapper(model)
      );
    }
    if (known) return known;
    const wrapper = resolveChatWrapper(model);
    this.chatWrappers.set(key, wrapper instanceof JinjaTemplateChatWrapper ? 'jinja' : wrapper);
    return wrapper;
  }

  promptCacheUse(): PromptCacheTier[] {
    return this.promptCache?.use() ?? [];
  }

  /** What the prompt cache saved and restored so far, and what that took; null without one. */
  get promptCacheStats(): PromptCache['stats'] | null {
    return this.promptCache ? { ...this.promptCache.stats } : null;
  }

  async dispose(): Promise<void> {
    this.promptCache?.dispose();
    await this.llama.dispose();
  }
}

/**
 * Why `draft` cannot propose tokens to `target`, or null when it can: the same kind of tokenizer, no
 * more tokens than the target (a larger id would be out of the target's range), and the tokens they
 * share identical, so every id means the same text to both.
 */
export function vocabularyMismatch(target: LlamaModel, draft: LlamaModel): string | null {
  if (target.vocabularyType !== draft.vocabularyType)
    return `a ${draft.vocabularyType} tokenizer, the model's is ${target.vocabularyType}`;
  const ours = vocabulary(target);
  const theirs = vocabulary(draft);
  if (!ours || !theirs) return null;
  if (theirs.length > ours.length) return `${theirs.length} tokens, the model has ${ours.length}`;
  const differs = theirs.findIndex((token, i) => token !== ours[i]);
  return differs === -1
    ? null
    : `token ${differs} is ${JSON.stringify(theirs[differs])}, the model's is ${JSON.stringify(ours[differs])}`;
}

/** A cache key that changes when a local file does: its path, size and time; a remote source is its name. */
function fileKey(path: string): string {
  if (isRemote(path)) return path;
  const file = statSync(path, { throwIfNoEntry: false });
  return `${path}|${file?.size}|${file?.mtimeMs}`;
}

/** The sizes of a local GGUF's parts. */
function localSizes(info: GgufFileInfo): number[] {
  return info.sourceData.flatMap((part) => (part.type === 'path' ? [statSync(part.path).size] : []));
}
