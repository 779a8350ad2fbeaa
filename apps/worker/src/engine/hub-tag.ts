import { existsSync } from 'node:fs';
import { readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CortexError } from '@cortex/contracts';
import { hubEndpoint, localCopy } from './model-source.js';

export interface HubTagOptions {
  /** The catalogue model it is for, named in every error. */
  model: string;
  /** Where the answer is remembered, beside the files it names. */
  modelsDir: string;
  /** The hub's token; `HF_TOKEN` of `env` when not given. */
  token?: string;
  signal?: AbortSignal;
  log: (line: string) => void;
  env?: NodeJS.ProcessEnv;
  /** How long the hub may take to answer. */
  timeoutMs?: number;
}

/** The hub answers the manifest with its GGUF file only to llama.cpp's user agent (ggml-org/llama.cpp#11195). */
const USER_AGENT = 'llama-cpp';
const TIMEOUT_MS = 30_000;

/**
 * `hf:<user>/<repo>:<tag>` (`latest` without a tag) → `hf:<user>/<repo>/<file>`: the file the hub's
 * manifest names for the tag, asked as llama.cpp and node-llama-cpp ask it. The file is then fetched
 * like any `hf:` file (ModelDownload: one download per host, resumable, its SHA-256 checked).
 *
 * The answer is remembered in the models directory, so a worker that cannot reach the hub still
 * loads a tag whose file it has whole on disk. With the hub reachable it is always asked, since a
 * tag can move to another file.
 */
export async function resolveHubTag(source: string, options: HubTagOptions): Promise<string> {
  const { user, repo, tag } = parseHubTag(source);
  const remembered = join(options.modelsDir, `hf_${user}_${repo}_${tag}.tag`);
  let file: string;
  try {
    file = await askManifest(source, user, repo, tag, options);
  } catch (error) {
    if (!(error instanceof HubUnavailable) || options.signal?.aborted) throw error;
    const before = existsSync(remembered) ? (await readFile(remembered, 'utf8')).trim() : '';
    if (!before || !localCopy(before, options.modelsDir)) throw error;
    options.log(
      `${error.message}; loading ${before}, which ${source} named when it was last asked and which is on disk`,
    );
    return before;
  }
  const resolved = `hf:${user}/${repo}/${file}`;
  // Written whole or not at all: another worker sharing the directory may read it at any time.
  const part = `${remembered}.${process.pid}`;
  await writeFile(part, `${resolved}\n`);
  await rename(part, remembered);
  return resolved;
}

/** The parts of `hf:<user>/<repo>[:<tag>]`. */
export function parseHubTag(source: string): { user: string; repo: string; tag: string } {
  const [user = '', named = ''] = source.slice('hf:'.length).split('/');
  const colon = named.indexOf(':');
  const repo = colon === -1 ? named : named.slice(0, colon);
  const tag = colon === -1 ? 'latest' : named.slice(colon + 1);
  if (!user || !repo || !tag || !/^[\w.-]+$/.test(`${user}${repo}${tag}`)) {
    throw new CortexError(
      'model_load_failed',
      `"${source}" is not a hub tag: write hf:<user>/<repo>:<quant>, for example hf:bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M`,
    );
  }
  return { user, repo, tag };
}

/** The hub could not be asked, or failed (5xx): a remembered answer may stand in. */
class HubUnavailable extends CortexError {}

/**
 * The manifest's GGUF file for the tag. A refusal or a missing tag is an error that says what to do;
 * so is an unavailable hub (HubUnavailable).
 */
async function askManifest(
  source: string,
  user: string,
  repo: string,
  tag: string,
  options: HubTagOptions,
): Promise<string> {
  const url = `${hubEndpoint(options.env)}v2/${encodeURIComponent(user)}/${encodeURIComponent(repo)}/manifests/${encodeURIComponent(tag)}`;
  const headers: Record<string, string> = { 'user-agent': USER_AGENT, accept: 'application/json' };
  const token = options.token ?? (options.env ?? process.env).HF_TOKEN;
  if (token) headers.authorization = `Bearer ${token}`;
  const signal = AbortSignal.any([
    AbortSignal.timeout(options.timeoutMs ?? TIMEOUT_MS),
    ...(options.signal ? [options.signal] : []),
  ]);
  let response: Response;
  try {
    response = await fetch(url, { headers, signal });
  } catch (error) {
    if (options.signal?.aborted) throw options.signal.reason;
    const cause =
      (error as Error).cause instanceof Error ? ((error as Error).cause as Error).message : (error as Error).message;
    throw new HubUnavailable(
      'model_load_failed',
      `${options.model}: cannot ask the hub which file ${source} is (${url}): ${cause}; check the worker's network and HF_ENDPOINT`,
    );
  }
  const answered = `${options.model}: the hub's manifest for ${source} (${url}) answered ${response.status}`;
  if (response.status === 401 || response.status === 403)
    throw new CortexError(
      'model_load_failed',
      `${answered}: set HF_TOKEN to a token that may read the repository, or accept its licence on the hub`,
    );
  if (response.status === 404)
    throw new CortexError(
      'model_load_failed',
      `${answered}: no repository ${user}/${repo} with a tag ${tag}; check ` +
        `the names, or name the file itself (hf:${user}/${repo}/<file>.gguf)`,
    );
  if (!response.ok) throw new HubUnavailable('model_load_failed', `${answered}: the hub failed; try again later`);
  const manifest: unknown = await response.json().catch(() => null);
  const file = (manifest as { ggufFile?: { rfilename?: unknown } } | null)?.ggufFile?.rfilename;
  if (
    typeof file !== 'string' ||
    !/\.gguf$/i.test(file) ||
    file.split('/').some((part) => part === '' || part === '..')
  ) {
    throw new CortexError(
      'model_load_failed',
      `${options.model}: the hub's manifest for ${source} names no GGUF file ` +
        `(ggufFile.rfilename); name the file itself (hf:${user}/${repo}/<file>.gguf)`,
    );
  }
  return file;
}
