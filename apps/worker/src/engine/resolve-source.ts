import { existsSync } from 'node:fs';
import {
  ensureFamilyFixtures,
  ensureFixtureModels,
  ensureVisionFixture,
  visionFixtureFor,
  familyFixture,
  type FixtureVocabulary,
} from '@cortex/fixtures';
import { CortexError } from '@cortex/contracts';
import { memoAsync } from './memo.js';
import { ModelDownload, type DownloadProgress } from './model-download.js';
import { resolveHubTag } from './hub-tag.js';
import { isHubTag, remoteSource } from './model-source.js';

export interface ResolveOptions {
  modelsDir: string;
  log: (line: string) => void;
  /** The catalogue model the source is for, named in errors. */
  model?: string;
  /** The SHA-256 the config pins for the file. */
  sha256?: string;
  onProgress?: (progress: DownloadProgress) => void;
  signal?: AbortSignal;
}

/** The generated fixture set per models directory and vocabulary: written (or checked) once per process, not per load. */
const fixtureSets = new Map<string, Promise<Record<string, string>>>();

function fixtures(
  modelsDir: string,
  vocabulary: FixtureVocabulary,
  log: (line: string) => void,
): Promise<Record<string, string>> {
  return memoAsync(fixtureSets, `${vocabulary}:${modelsDir}`, () =>
    ensureFixtureModels(modelsDir, { log, vocabulary }),
  );
}

/**
 * A catalogue `file` → a local GGUF path. `fixture:<id>` models are generated on first use
 * (`fixture:<id>:bytes` with the byte-level vocabulary); URLs and `hf:<user>/<repo>/<file>` are
 * downloaded into the models directory by a ModelDownload (resumable, once per host, verified);
 * `hf:<user>/<repo>:<quant>` asks the hub's manifest for its file (resolveHubTag), then fetches that
 * file the same way.
 */
export async function resolveSource(source: string, options: ResolveOptions): Promise<string> {
  const { modelsDir, log } = options;
  if (source.startsWith('fixture:')) {
    const [id = '', variant] = source.slice('fixture:'.length).split(':');
    const vocabulary: FixtureVocabulary = variant === 'bytes' ? 'bytes' : 'words';
    if (variant !== undefined && variant !== 'bytes') {
      throw new CortexError('model_load_failed', `fixture "${source}": the only variant is ":bytes"`);
    }
    // A model family's fixture (its real template and output): generated alone, on first use.
    if (familyFixture(id) && variant === undefined) {
      const path = (
        await memoAsync(fixtureSets, `family:${id}:${modelsDir}`, () =>
          ensureFamilyFixtures(modelsDir, { ids: [id], log }),
        )
      )[id];
      if (path && existsSync(path)) return path;
      fixtureSets.delete(`family:${id}:${modelsDir}`);
      return (await ensureFamilyFixtures(modelsDir, { ids: [id], log }))[id] as string;
    }
    // A vision fixture's text model and its projector (`fixture:mmproj-<id>`), written together.
    const vision = visionFixtureFor(id);
    if (vision && variant === undefined) {
      const key = `vision:${vision.fixture.id}:${modelsDir}`;
      const write = () => ensureVisionFixture(modelsDir, { fixture: vision.fixture, log });
      const written = await memoAsync(fixtureSets, key, write);
      const path = written[vision.part];
      if (path && existsSync(path)) return path;
      fixtureSets.delete(key);
      return (await write())[vision.part];
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
  const remote = remoteSource(source);
  if (remote) {
    return new ModelDownload({
      model: options.model ?? source,
      source: remote,
      dir: modelsDir,
      log,
      ...(options.sha256 && { sha256: options.sha256 }),
      ...(process.env.HF_TOKEN && { token: process.env.HF_TOKEN }),
      ...(options.onProgress && { onProgress: options.onProgress }),
      ...(options.signal && { signal: options.signal }),
    }).run();
  }
  if (isHubTag(source)) {
    const file = await resolveHubTag(source, {
      model: options.model ?? source,
      modelsDir,
      log,
      ...(options.signal && { signal: options.signal }),
    });
    return resolveSource(file, { ...options, model: options.model ?? source });
  }
  if (!existsSync(source)) {
    throw new CortexError(
      'model_load_failed',
      `model file ${source} does not exist; fix the model's "file" in the config`,
    );
  }
  return source;
}
