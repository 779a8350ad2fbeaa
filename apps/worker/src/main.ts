import { tmpdir } from 'node:os';
import { startBusApp, type ServiceStart } from '@cortex/bus';
import { defaultPromptCacheDir, LlamaEngine, SyntheticEngine, type Engine } from './engine/index.js';
import { WorkerModule } from './worker.module.js';
import { defaultWorkerId, WorkerService } from './worker.service.js';

/** One worker process per GPU (or per CPU host). */
export const start: ServiceStart = async (context) => {
  const { config, nc, logger } = context;
  if (config.worker.device !== undefined && process.env.CUDA_VISIBLE_DEVICES === undefined) {
    // Must be set before the backend initialises CUDA.
    process.env.CUDA_VISIBLE_DEVICES = String(config.worker.device);
  }
  const engine: Engine =
    config.worker.engine === 'synthetic'
      ? new SyntheticEngine(config.worker.syntheticTokensPerSecond)
      : await LlamaEngine.create({
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
          log: (line) => logger.log(line, 'engine'),
        });
  const workerId = defaultWorkerId(config, engine.backend);
  return startBusApp(WorkerModule.register(config, nc, engine, workerId), {
    service: 'worker',
    context,
    workerId,
    detail: (app) => app.get(WorkerService).readiness(),
  });
};
