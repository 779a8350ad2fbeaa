import type { ModelFacts, PromptCacheTier } from '@cortex/contracts';
import type { Engine, EngineModel, ModelSpec } from './engine.types.js';
import type { ResolveOptions } from './resolve-source.js';

/**
 * The worker's engine, chosen per model at load from its spec: a model with a projector (the
 * catalogue's `mmproj`) goes to the vision engine, made on first use; every other to the text engine
 * (node-llama-cpp). Downloads, headers and the device are the text engine's for both.
 */
export class ByModelEngine implements Engine {
  private vision: Promise<Engine> | null = null;

  constructor(
    private readonly text: Engine,
    private readonly makeVision: () => Promise<Engine>,
  ) {}

  get backend(): string {
    return this.text.backend;
  }

  resolveSource(source: string, options: ResolveOptions): Promise<string> {
    return this.text.resolveSource(source, options);
  }

  device(): ReturnType<Engine['device']> {
    return this.text.device();
  }

  async estimate(spec: Pick<ModelSpec, 'path' | 'contextSize' | 'slots' | 'kind' | 'mmproj'>): Promise<number> {
    return (await this.engineFor(spec)).estimate(spec);
  }

  facts(path: string): Promise<ModelFacts> {
    return this.text.facts(path);
  }

  async load(spec: ModelSpec, onProgress?: (fraction: number) => void, signal?: AbortSignal): Promise<EngineModel> {
    return (await this.engineFor(spec)).load(spec, onProgress, signal);
  }

  async restart(): Promise<void> {
    await this.text.restart();
    await (await this.vision)?.restart();
  }

  async dispose(): Promise<void> {
    await this.text.dispose();
    await (await this.vision?.catch(() => null))?.dispose();
  }

  promptCacheUse(): PromptCacheTier[] {
    return this.text.promptCacheUse?.() ?? [];
  }

  private engineFor(spec: Pick<ModelSpec, 'mmproj'>): Promise<Engine> {
    if (spec.mmproj === undefined) return Promise.resolve(this.text);
    // A failed start (a GPU package that cannot load) is tried again at the next vision model's load.
    this.vision ??= this.makeVision().catch((error: unknown) => {
      this.vision = null;
      throw error;
    });
    return this.vision;
  }
}
