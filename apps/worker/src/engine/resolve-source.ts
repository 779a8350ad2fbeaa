import { existsSync } from 'node:fs';
import { resolveModelFile } from 'node-llama-cpp';
import { ensureFixtureModels, type FixtureVocabulary } from '@cortex/fixtures';
import { CortexError } from '@cortex/contracts';
import { memoAsync } from './memo.js';
import type { FetchOptions } from './engine.types.js';

/** The generated fixture set per models directory and vocabulary: written (or checked) once per process, not per load. */
const fixtureSets = new Map<string, Promise<Record<string, string>>>();

function fixtures(modelsDir: string, vocabulary: FixtureVocabulary, log: (line: string) => void): Promise<Record<string, string>> {
  return memoAsync(fixtureSets, `${vocabulary}:${modelsDir}`, () => ensureFixtureModels(modelsDir, { log, vocabulary }));
}

/**
 * A catalogue `file` → a local GGUF path. `fixture:<id>` models are generated on first use
 * (`fixture:<id>:bytes` with the byte-level vocabulary);
 * `hf:` and URLs are downloaded into the models directory with progress (where a hub is reachable).
 */
export async function resolveSource(source: string, modelsDir: string, log: (line: string) => void, fetch: FetchOptions = {}): Promise<string> {
  if (source.startsWith('fixture:')) {
    const [id = '', variant] = source.slice('fixture:'.length).split(':');
    const vocabulary: FixtureVocabulary = variant === 'bytes' ? 'bytes' : 'words';
    if (variant !== undefined && variant !== 'bytes') {
      throw new CortexError('model_load_failed', `fixture "${source}": the only variant is ":bytes"`);
    }
    let paths = await fixtures(modelsDir, vocabulary, log);
    if (paths[id] && !existsSync(paths[id])) {
      // Removed since it was written: generate the set again.
      fixtureSets.delete(`${vocabulary}:${modelsDir}`);
      paths = await fixtures(modelsDir, vocabulary, log);
    }
    const path = paths[id];
    if (!path) {
      throw new CortexError('model_load_failed', `no fixture model "${id}"; known: ${Object.keys(paths).join(', ')}`);
    }
    return path;
  }
  if (/^(hf:|https?:)/.test(source)) {
    let lastPercent = -10;
    try {
      return await resolveModelFile(source, {
        directory: modelsDir,
        cli: false,
        ...(fetch.signal && { signal: fetch.signal }),
        onProgress: ({ downloadedSize, totalSize }) => {
          if (totalSize > 0) fetch.onProgress?.(Math.min(1, downloadedSize / totalSize));
          const percent = totalSize > 0 ? Math.floor((downloadedSize / totalSize) * 100) : 0;
          if (percent >= lastPercent + 10) {
            lastPercent = percent;
            log(`downloading ${source}: ${percent}%`);
          }
        },
      });
    } catch (error) {
      if (fetch.signal?.aborted) throw fetch.signal.reason;
      throw new CortexError(
        'model_load_failed',
        `cannot fetch ${source}: ${(error as Error).message}; download the GGUF yourself and set the model's file to its path`,
        { cause: error },
      );
    }
  }
  if (!existsSync(source)) {
    throw new CortexError('model_load_failed', `model file ${source} does not exist; fix the model's "file" in the config`);
  }
  return source;
}
