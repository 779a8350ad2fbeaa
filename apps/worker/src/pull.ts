import type { CortexConfig, ModelConfig } from '@cortex/config';
import type { DownloadProgress } from './engine/model-download.js';
import { resolveSource } from './engine/resolve-source.js';

/** A source `cortex pull` fetches, with the catalogue model whose file it is (its id and SHA-256); none for a bare source. */
export interface PullSource {
  source: string;
  model?: ModelConfig;
}

/**
 * The sources `cortex pull` fetches, each once (with the first model that names it): each model's
 * file (an upstream model has none) and each draft that is a source rather than a catalogue id or `lookup`.
 */
export function pullSources(config: CortexConfig, target?: string): PullSource[] {
  const ids = new Set(config.models.map((m) => m.id));
  const models =
    target === undefined ? config.models : config.models.filter((m) => m.id === target || m.aliases?.includes(target));
  // Not a catalogue model: a source of its own (a URL, an hf: URI, a fixture).
  if (target !== undefined && models.length === 0) return [{ source: target }];
  const drafts = models
    .map((m) => m.draft)
    .filter((d): d is string => d !== undefined && d !== 'lookup' && !ids.has(d));
  const draftModels = models
    .map((m) => config.models.find((d) => d.id === m.draft))
    .filter((d): d is ModelConfig => d !== undefined && !models.includes(d));
  const all: PullSource[] = [
    // An upstream model has no file to fetch.
    ...[...models, ...draftModels].flatMap((model) =>
      model.file === undefined ? [] : [{ source: model.file, model }],
    ),
    ...drafts.map((source) => ({ source })),
  ];
  return all.filter((pair, i) => all.findIndex((other) => other.source === pair.source) === i);
}

export interface PullOptions {
  /** A catalogue model (id or alias) or a source; absent: every model of the catalogue. */
  target?: string;
  onProgress?: (source: string, progress: DownloadProgress) => void;
}

/**
 * `cortex pull`: puts models into `worker.models_dir` as a worker would fetch them on a load —
 * fixtures generated, `hf:` and URL sources downloaded (resumable, HF_TOKEN for gated models),
 * paths checked — so that workers can mount that directory read-only and never download inside a
 * load. Resolves each source's local path; throws on the first that cannot be had, naming it.
 */
export async function pull(
  config: CortexConfig,
  log: (line: string) => void,
  options: PullOptions = {},
): Promise<Record<string, string>> {
  const paths: Record<string, string> = {};
  for (const { source, model } of pullSources(config, options.target)) {
    paths[source] = await resolveSource(source, {
      modelsDir: config.worker.modelsDir,
      log,
      model: model?.id ?? source,
      ...(model?.sha256 && { sha256: model.sha256 }),
      ...(options.onProgress && { onProgress: (progress: DownloadProgress) => options.onProgress?.(source, progress) }),
    });
    log(`pull: ${source} → ${paths[source]}`);
  }
  return paths;
}
