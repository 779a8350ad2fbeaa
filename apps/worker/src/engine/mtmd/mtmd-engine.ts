import { stat } from 'node:fs/promises';
import { freemem, totalmem } from 'node:os';
import { readGgufFileInfo } from 'node-llama-cpp';
import type { ModelFacts } from '@cortex/contracts';
import type { Engine, EngineModel, ModelSpec } from '../engine.types.js';
import { resolveSource, type ResolveOptions } from '../resolve-source.js';
import { ggufSamplingDefaults } from '../sampling-defaults.js';
import { chooseFormat } from '../formats/choose-format.js';
import type { ProbeRender } from '../formats/derive.js';
import { defuser, specialPattern } from '../formats/template-prompt.js';
import { llamaNode, type LibVariant, type LlamaNodeContext } from './llama-node.types.js';
import { MtmdEngineModel } from './mtmd-model.js';
import { llamaNodeTools, mediaMessages } from './mtmd-request.js';
import { checkProjector } from './projector-check.js';
import { headerVocabulary } from '../vocabulary.js';

export interface MtmdEngineOptions {
  /** `cuda` and `vulkan` use llama.node's prebuilt GPU packages (docs/deployment.md, "Serving a vision model"). */
  gpu: 'cpu' | 'cuda' | 'vulkan';
  /** llama.cpp's threads, for the text model and the image encoder alike; at least 1. */
  threads: number;
  log: (line: string) => void;
}

/** Prompt tokens evaluated per batch: the slot API takes one batch size for every slot. */
const BATCH = 512;

/**
 * The vision engine: a chat model and its projector (`mmproj`) on @fugood/llama.node, which wraps
 * llama.cpp's mtmd; node-llama-cpp has no API for image embeddings. See MtmdEngineModel for what it
 * serves and mtmd-request.ts for what it refuses.
 */
export class MtmdEngine implements Engine {
  private constructor(private readonly options: MtmdEngineOptions) {}

  /** Fails when the GPU package asked for cannot load: llama.node would fall back to the CPU without a word. */
  static async create(options: MtmdEngineOptions): Promise<MtmdEngine> {
    const variant = variantOf(options.gpu);
    if (variant !== 'default' && !(await llamaNode().isLibVariantAvailable(variant)))
      throw new Error(
        `the vision engine cannot load @fugood/llama.node's ${variant} build: install ` +
          `@fugood/node-llama-linux-x64-${variant} and its runtime libraries, or run it on the CPU`,
      );
    return new MtmdEngine(options);
  }

  /** Whether llama.node's build for `gpu` loads here (its package installed, its runtime libraries found). */
  static available(gpu: 'cuda' | 'vulkan'): Promise<boolean> {
    return llamaNode().isLibVariantAvailable(gpu);
  }

  get backend(): string {
    return this.options.gpu;
  }

  resolveSource(source: string, options: ResolveOptions): Promise<string> {
    return resolveSource(source, options);
  }

  async device(): Promise<{ name: string; kind: string; totalBytes: number; freeBytes: number }> {
    if (this.options.gpu === 'cpu') return { name: 'cpu', kind: 'cpu', totalBytes: totalmem(), freeBytes: freemem() };
    const devices = await llamaNode().getBackendDevicesInfo(variantOf(this.options.gpu));
    const gpus = devices.filter((d) => d.type.toLowerCase() === 'gpu');
    const total = gpus.reduce((sum, d) => sum + d.maxMemorySize, 0);
    // llama.node reports no free memory: the worker's own accounting of its models is what limits it.
    return {
      name: gpus.map((d) => d.deviceName).join(', ') || this.options.gpu,
      kind: this.options.gpu,
      totalBytes: total,
      freeBytes: total,
    };
  }

  /** The files' bytes and the KV cache of every slot at f16, from the text model's header. */
  async estimate(spec: Pick<ModelSpec, 'path' | 'contextSize' | 'slots' | 'kind' | 'mmproj'>): Promise<number> {
    const files = await Promise.all([spec.path, spec.mmproj].map(async (path) => (path ? (await stat(path)).size : 0)));
    const info = await readGgufFileInfo(spec.path, { logWarnings: false });
    const arch =
      (info.metadata as unknown as Record<string, Record<string, unknown>>)[info.metadata.general.architecture] ?? {};
    const layers = Number(arch.block_count ?? 0);
    const width = Number(arch.embedding_length ?? 0);
    const heads = Number(
      arch['attention.head_count'] ?? (arch.attention as Record<string, unknown> | undefined)?.head_count ?? 1,
    );
    const kvHeads = Number((arch.attention as Record<string, unknown> | undefined)?.head_count_kv ?? heads);
    const kvBytes = 2 * 2 * layers * (width / Math.max(1, heads)) * kvHeads * spec.contextSize * spec.slots;
    return files.reduce((a, b) => a + b, 0) + kvBytes;
  }

  async facts(path: string): Promise<ModelFacts> {
    const [info, size] = await Promise.all([readGgufFileInfo(path, { logWarnings: false }), stat(path)]);
    const sampling = ggufSamplingDefaults(info.metadata.general);
    return {
      architecture: info.metadata.general.architecture,
      fileBytes: size.size,
      ...(Object.keys(sampling).length > 0 && { sampling }),
    };
  }

  async load(spec: ModelSpec, onProgress?: (fraction: number) => void, signal?: AbortSignal): Promise<EngineModel> {
    const projector = spec.mmproj;
    if (!projector)
      throw new Error(
        `${spec.id} has no mmproj: the vision engine serves a model with its projector (the catalogue's mmproj)`,
      );
    await checkProjector(projector, spec.path);
    signal?.throwIfAborted();
    const { gpu, threads } = this.options;
    const [info, size] = await Promise.all([readGgufFileInfo(spec.path, { logWarnings: false }), stat(spec.path)]);
    const context = await llamaNode().loadModel(
      {
        model: spec.path,
        // llama.node divides its context evenly between the slots.
        n_ctx: spec.contextSize * spec.slots,
        n_batch: BATCH,
        n_threads: Math.max(1, threads),
        n_gpu_layers: gpu === 'cpu' ? 0 : 999,
        n_parallel: spec.slots,
        lib_variant: variantOf(gpu),
        ...(spec.chatTemplate && { chat_template: spec.chatTemplate }),
      },
      onProgress,
    );
    try {
      signal?.throwIfAborted();
      if (gpu !== 'cpu' && context.getUsedDevices().length === 0)
        throw new Error(
          `${spec.id} was loaded on the CPU although ${gpu} was asked for: check the GPU driver and runtime`,
        );
      let ready = false;
      try {
        // use_gpu must be given: llama.node reads a missing one as false, whatever its documentation says.
        ready = context.initMultimodal({ path: projector, use_gpu: gpu !== 'cpu' });
      } catch (error) {
        throw new Error(
          `llama.cpp refused the mmproj ${projector} for ${spec.id} (its reason is in the worker's stderr)`,
          {
            cause: error,
          },
        );
      }
      if (!ready) throw new Error(`llama.cpp refused the mmproj ${projector} for ${spec.id}`);
      await context.parallel.enable({ n_parallel: spec.slots, n_batch: BATCH });
      const projectorBytes = (await stat(projector)).size;
      const source = spec.chatTemplate ?? info.metadata.tokenizer?.chat_template ?? '';
      const dialect = {
        ...chooseFormat(spec, source, source ? probe(context, spec.chatTemplate) : null),
        source,
        vocabulary: headerVocabulary(info.metadata),
      };
      this.options.log(
        `${spec.id}: loaded with ${projector} on llama.node ${llamaNode().BuildInfo.commit} (${gpu}); ` +
          `output format ${dialect.format.id} (${dialect.chosenBy})`,
      );
      return new MtmdEngineModel(
        spec,
        context,
        size.size + projectorBytes,
        spec.contextSize,
        ggufSamplingDefaults(info.metadata.general),
        dialect,
        defuser(specialPattern(info.metadata)),
      );
    } catch (error) {
      await context.release();
      throw error;
    }
  }

  /** llama.node keeps no backend state between models to renew. */
  restart(): Promise<void> {
    return Promise.resolve();
  }

  dispose(): Promise<void> {
    return Promise.resolve();
  }
}

function variantOf(gpu: MtmdEngineOptions['gpu']): LibVariant {
  return gpu === 'cpu' ? 'default' : gpu;
}

/** Renders a conversation with the model's template as it is, no generation prompt: for learning its format (deriveFormat). */
function probe(context: LlamaNodeContext, template: string | undefined): ProbeRender {
  return (messages, tools) =>
    context.getFormattedChat(mediaMessages(messages).messages, template, {
      jinja: true,
      add_generation_prompt: false,
      ...(tools?.length && { tools: llamaNodeTools(tools) }),
    }).prompt;
}
