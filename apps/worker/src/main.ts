import { tmpdir } from 'node:os';
import { startBusApp, type ServiceStart } from '@cortex/bus';
import {
  ByModelEngine,
  defaultPromptCacheDir,
  LlamaEngine,
  MtmdEngine,
  RemoteEngine,
  SyntheticEngine,
  type Engine,
} from './engine/index.js';
import { WorkerModule } from './worker.module.js';
import { defaultWorkerId, WorkerService } from './worker.service.js';

/** One worker process per GPU (or per CPU host). */
export const start: ServiceStart = async (context) => {
  const { config, nc, logger } = context;
  if (config.worker.device !== undefined && process.env.CUDA_VISIBLE_DEVICES === undefined) {
    // Must be set before the backend initialises CUDA.
    process.env.CUDA_VISIBLE_DEVICES = String(config.worker.device);
  }
  const log = (line: string): void => logger.log(line, 'engine');
  const engine: Engine =
    config.worker.engine === 'synthetic'
      ? new SyntheticEngine(config.worker.syntheticTokensPerSecond)
      : config.worker.engine === 'remote'
        ? new RemoteEngine()
        : new ByModelEngine(
            await LlamaEngine.create({
              gpu: config.worker.gpu,
              threads: config.worker.threads,
              nativeGcBytes: config.worker.nativeGcMb * 2 ** 20,
              promptCache: {
                dir: config.worker.promptCacheDir ?? defaultPromptCacheDir(),
                maxBytes: config.worker.promptCacheMb * 2 ** 20,
                disk: {
                  dir: config.worker.promptCacheDiskDir ?? tmpdir(),
                  maxBytes: config.worker.promptCacheDiskMb * 2 ** 20,
                },
              },
              log,
            }),
            // A model with a projector: llama.cpp's mtmd through @fugood/llama.node, on the worker's GPU kind.
            async () =>
              MtmdEngine.create({ gpu: await visionGpu(config.worker.gpu), threads: config.worker.threads, log }),
          );
  const workerId = defaultWorkerId(config, engine.backend);
  return startBusApp(WorkerModule.register(config, nc, engine, workerId), {
    service: 'worker',
    context,
    workerId,
    detail: (app) => app.get(WorkerService).readiness(),
  });
};

/**
 * The vision engine's build for the worker's `gpu`: `auto` takes CUDA, then Vulkan, where llama.node's
 * package for it loads here, else the CPU; `metal` is not built for Linux.
 */
async function visionGpu(gpu: string): Promise<'cpu' | 'cuda' | 'vulkan'> {
  if (gpu === 'cuda' || gpu === 'vulkan') return gpu;
  if (gpu !== 'auto') return 'cpu';
  for (const variant of ['cuda', 'vulkan'] as const) if (await MtmdEngine.available(variant)) return variant;
  return 'cpu';
}
