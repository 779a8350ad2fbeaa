import { existsSync } from 'node:fs';
import { basename, join } from 'node:path';

/**
 * Where a remote model source lives: its URL(s) and the file name it gets in the models directory.
 * `hf:<user>/<repo>/<path>[#<branch>]` names a file on a Hugging Face hub (the endpoint from
 * `MODEL_ENDPOINT` or `HF_ENDPOINT`, as node-llama-cpp and llama.cpp read them); `http(s)://` is the file
 * itself. A GGUF split in parts (`…-00001-of-00003.gguf`) is all its parts, first to last.
 */
export interface RemoteSource {
  /** The parts' URLs, first to last (one for an unsplit file). */
  urls: string[];
  /** Their file names in the models directory, in the same order; the first is the one to load. */
  files: string[];
  /** Whether the host is a hub that a `HF_TOKEN` authorizes. */
  hub: boolean;
}

/** `hf:<user>/<repo>:<quant>` names no file: the hub's manifest says which (see hub-tag.ts). */
export function isHubTag(source: string): boolean {
  if (!source.startsWith('hf:')) return false;
  const [user, repo, ...path] = source.slice('hf:'.length).split('/');
  return Boolean(user && repo) && path.length === 0;
}

export function isRemote(source: string): boolean {
  return /^(hf:|https?:\/\/)/.test(source);
}

/** The hub endpoint, with a trailing slash: `MODEL_ENDPOINT`, then `HF_ENDPOINT`, then huggingface.co. */
export function hubEndpoint(env: NodeJS.ProcessEnv = process.env): string {
  const url =
    [env.MODEL_ENDPOINT, env.HF_ENDPOINT].find((value) => value && /^https?:\/\//.test(value)) ??
    'https://huggingface.co/';
  return url.endsWith('/') ? url : `${url}/`;
}

/** A remote source's URLs and local names; null for a local path, a fixture or a hub tag. */
export function remoteSource(source: string, env: NodeJS.ProcessEnv = process.env): RemoteSource | null {
  if (!isRemote(source) || isHubTag(source)) return null;
  let url: string;
  let prefix = '';
  let hub: boolean;
  if (source.startsWith('hf:')) {
    const [spec = '', branch = 'main'] = source.slice('hf:'.length).split('#');
    const [user = '', repo = '', ...path] = spec.split('/');
    url =
      `${hubEndpoint(env)}${encodeURIComponent(user)}/${encodeURIComponent(repo)}/resolve/` +
      `${encodeURIComponent(branch)}/${path.map(encodeURIComponent).join('/')}`;
    prefix = `hf_${user}_${repo}_`;
    hub = true;
  } else {
    url = source;
    hub = new URL(source).host === new URL(hubEndpoint(env)).host;
  }
  const urls = splitParts(url);
  return { urls, files: urls.map((u) => prefix + decodeURIComponent(basename(new URL(u).pathname))), hub };
}

/** Every part of a split GGUF named by any one of them; the URL alone otherwise. */
export function splitParts(url: string): string[] {
  const parsed = new URL(url);
  const match = /-(\d{5})-of-(\d{5})\.gguf$/.exec(parsed.pathname);
  if (!match) return [url];
  const parts = Number(match[2]);
  return Array.from({ length: parts }, (_, i) => {
    const part = new URL(parsed);
    part.pathname = parsed.pathname.slice(0, match.index) + `-${String(i + 1).padStart(5, '0')}-of-${match[2]}.gguf`;
    return part.href;
  });
}

/** The downloaded file of a remote source, when it is whole on disk (no download of it under way); null otherwise. */
export function localCopy(source: string, modelsDir: string): Promise<string> | null {
  const remote = remoteSource(source);
  if (!remote) return null;
  const paths = remote.files.map((file) => join(modelsDir, file));
  const whole = paths.every((path) => existsSync(path) && !existsSync(`${path}.part`) && !existsSync(`${path}.lock`));
  return whole ? Promise.resolve(paths[0] ?? '') : null;
}
