import { stat } from 'node:fs/promises';
import {
  CortexError,
  type EstimateCommand,
  type EstimateReply,
  type LoadCommand,
  type LoadProgress,
  type LoadTrigger,
  type PullCommand,
  type PullResult,
} from '@cortex/contracts';
import { httpProblem } from './engine/model-download.js';
import { resolveHubTag } from './engine/hub-tag.js';
import { isHubTag, isRemote, localCopy, remoteSource } from './engine/model-source.js';
import type { RegistryDeps } from './model-registry.js';

/**
 * A model's files: where its sources resolve to (downloaded now when remote, with progress events),
 * the memory it takes with its contexts, and what its header says, read without fetching its weights.
 */
export class ModelFiles {
  /** Downloads under way for a load, by model: the heartbeat shows them as `downloading` with a share done. */
  private readonly downloads = new Map<string, { bytes: number; totalBytes: number }>();

  constructor(
    private readonly deps: Pick<RegistryDeps, 'config' | 'engine' | 'workerId' | 'logger'>,
    /** Publishes a load's progress (its download's, here). */
    private readonly publishProgress: (
      progress: Omit<LoadProgress, 'workerId' | 'trigger'>,
      trigger: LoadTrigger | undefined,
    ) => void,
  ) {}

  /** The download under way for a load of `model`, if any. */
  download(model: string): { bytes: number; totalBytes: number } | undefined {
    return this.downloads.get(model);
  }

  /**
   * The memory a model would take and what its header says, without fetching its weights: a remote
   * source not yet on disk is estimated from its header read over the network (range requests).
   */
  async estimate(command: EstimateCommand): Promise<EstimateReply> {
    try {
      return await this.readEstimate(command);
    } catch (error) {
      if (error instanceof CortexError) throw error;
      throw new CortexError(
        'model_load_failed',
        `${command.model ?? command.source}: cannot read the GGUF header of ` +
          `${command.source}: ${headerProblem(error as Error, command.source)}`,
        { cause: error },
      );
    }
  }

  private async readEstimate(command: EstimateCommand): Promise<EstimateReply> {
    const { engine } = this.deps;
    const log = (line: string): void => this.deps.logger.log(line);
    const modelsDir = this.deps.config.worker.modelsDir;
    const header = async (source: string): Promise<string> => {
      // A quant tag's header is its file's: on disk when it is whole there, else read where it lies.
      const named = isHubTag(source)
        ? await resolveHubTag(source, { model: command.model ?? source, modelsDir, log })
        : source;
      return localCopy(named, modelsDir) ?? this.source(named, log);
    };
    const path = await header(command.source);
    const draft = command.draft;
    const mmproj = command.mmproj === undefined ? undefined : await header(command.mmproj);
    const { bytes } = await this.memoryOf(
      { ...command, ...(mmproj && { mmproj }) },
      path,
      draft && draft !== 'lookup' ? () => header(draft) : undefined,
    );
    return { bytes, facts: await engine.facts(path) };
  }

  /**
   * The memory a model takes with its contexts, plus its draft model's with the same when it has one
   * (not `lookup`): the draft's file is found (`draftPath`) only once the model's own estimate is in.
   */
  private async memoryOf(
    command: Pick<LoadCommand, 'contextSize' | 'slots' | 'kind' | 'mmproj'>,
    path: string,
    draftPath?: () => Promise<string>,
  ): Promise<{ bytes: number; draft?: string }> {
    const { engine } = this.deps;
    const shape = { contextSize: command.contextSize, slots: command.slots };
    const bytes = await engine.estimate({
      path,
      ...shape,
      ...(command.kind && { kind: command.kind }),
      // Resolved: the vision engine estimates a model with its projector.
      ...(command.mmproj && { mmproj: command.mmproj }),
    });
    if (!draftPath) return { bytes };
    const draft = await draftPath();
    return { bytes: bytes + (await engine.estimate({ path: draft, ...shape })), draft };
  }

  /**
   * Download progress as events; a load's download (`tracked`) is also kept for the heartbeat until
   * the load's resolve ends, a pull's is not.
   */
  private downloading(
    model: string,
    how: { tracked: boolean; trigger?: LoadTrigger | undefined },
  ): (progress: { bytes: number; totalBytes: number }) => void {
    return ({ bytes, totalBytes }) => {
      this.publishProgress(
        { model, fraction: totalBytes > 0 ? bytes / totalBytes : 0, phase: 'downloading', bytes, totalBytes },
        how.trigger,
      );
      if (how.tracked) this.downloads.set(model, { bytes, totalBytes });
    };
  }

  /** Downloads a model's file ahead of a load (`cortex pull --worker|--all`), with the same progress events a load's download has. */
  async pull(command: PullCommand): Promise<PullResult> {
    const { workerId, config } = this.deps;
    const log = (line: string): void => this.deps.logger.log(`${command.model}: ${line}`);
    const path = await this.deps.engine.resolveSource(command.source, {
      modelsDir: config.worker.modelsDir,
      log,
      model: command.model,
      onProgress: this.downloading(command.model, { tracked: false }),
      ...(command.sha256 && { sha256: command.sha256 }),
    });
    return { model: command.model, workerId, path, bytes: (await stat(path)).size };
  }

  /** A fixture's or a local file's path; a remote source as is (its header is read where it lies). */
  private source(source: string, log: (line: string) => void): Promise<string> {
    if (isRemote(source)) return Promise.resolve(source);
    return this.deps.engine.resolveSource(source, { modelsDir: this.deps.config.worker.modelsDir, log });
  }

  /** The model's local file (downloaded now if it is remote), its draft's (or `lookup`), and the memory both take with their contexts. */
  async resolve(
    command: LoadCommand,
    log: (line: string) => void,
    signal?: AbortSignal,
  ): Promise<{ path: string; draft?: string; mmproj?: string; bytes: number }> {
    const { engine, config } = this.deps;
    const model = command.model;
    const onProgress = this.downloading(model, { tracked: true, trigger: command.trigger });
    const options = { modelsDir: config.worker.modelsDir, log, model, onProgress, ...(signal && { signal }) };
    try {
      const path = await engine.resolveSource(command.source, {
        ...options,
        ...(command.sha256 && { sha256: command.sha256 }),
      });
      // A projector is downloaded like its model (and before the estimate, which reads its size).
      const mmproj = command.mmproj === undefined ? undefined : await engine.resolveSource(command.mmproj, options);
      const sized = { ...command, mmproj };
      const draft = command.draft;
      if (!draft || draft === 'lookup')
        return { path, ...(draft && { draft }), ...(mmproj && { mmproj }), ...(await this.memoryOf(sized, path)) };
      return {
        path,
        ...(mmproj && { mmproj }),
        ...(await this.memoryOf(sized, path, () => engine.resolveSource(draft, options))),
      };
    } finally {
      this.downloads.delete(model);
    }
  }
}

/** node-llama-cpp's header reader says `Failed to fetch byte range: 401 Unauthorized`: the status, said as a download says it. */
function headerProblem(error: Error, source: string): string {
  const status = /\b([45]\d\d)\b/.exec(error.message)?.[1];
  const remote = remoteSource(source);
  if (!status || !remote) return error.message;
  return httpProblem(Number(status), remote.urls[0] ?? source, remote.hub);
}
