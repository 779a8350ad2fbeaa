import type { CortexConfig } from '@cortex/config';
import { resolveSource } from './engine/resolve-source.js';

/** The sources `cortex pull` fetches: each model's file and each draft that is a source rather than a catalogue id or `lookup`. */
export function pullSources(config: CortexConfig): string[] {
  const ids = new Set(config.models.map((m) => m.id));
  const drafts = config.models.map((m) => m.draft).filter((d): d is string => d !== undefined && d !== 'lookup' && !ids.has(d));
  return [...new Set([...config.models.map((m) => m.file), ...drafts])];
}

/**
 * `cortex pull`: puts every model of the catalogue into `worker.models_dir` as a worker would fetch it
 * on a load — fixtures generated, `hf:` and URL sources downloaded (HF_TOKEN for gated models), paths
 * checked — so that workers can mount that directory read-only and never download inside a load.
 * Resolves each source's local path; throws on the first that cannot be had, naming it.
 */
export async function pull(config: CortexConfig, log: (line: string) => void): Promise<Record<string, string>> {
  const paths: Record<string, string> = {};
  for (const source of pullSources(config)) {
    paths[source] = await resolveSource(source, { modelsDir: config.worker.modelsDir, log });
    log(`pull: ${source} → ${paths[source]}`);
  }
  return paths;
}
