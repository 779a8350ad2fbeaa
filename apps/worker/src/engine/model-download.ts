import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { open, readFile, rename, stat, statfs, truncate, unlink } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { GgufInsights, readGgufFileInfo } from 'node-llama-cpp';
import { CortexError, mib } from '@cortex/contracts';
import type { RemoteSource } from './model-source.js';

export interface DownloadProgress {
  /** Bytes on disk so far, all parts together (a resumed download starts from what it had). */
  bytes: number;
  /** The full size, all parts together; 0 until the server has said it. */
  totalBytes: number;
}

export interface ModelDownloadOptions {
  /** The catalogue model it is for, named in every error. */
  model: string;
  source: RemoteSource;
  dir: string;
  /** The SHA-256 the config pins (of an unsplit file). */
  sha256?: string;
  /** `HF_TOKEN` for a hub. */
  token?: string;
  log: (line: string) => void;
  onProgress?: (progress: DownloadProgress) => void;
  signal?: AbortSignal;
  /** A lock whose owner's part file has not grown for this long is taken over (an owner on another host, hung). */
  staleLockMs?: number;
  /** Attempts per part when the connection drops; each resumes where the last stopped. */
  attempts?: number;
}

/** What a lock file holds: who downloads the file. */
interface LockOwner {
  pid: number;
  host: string;
  at: number;
}

const LOCK_POLL_MS = 200;
const MAX_REDIRECTS = 5;
const PROGRESS_EVERY_MS = 500;

/**
 * One remote model onto local disk, done so that a bad download is never loaded: resumed from its
 * `.part` file after an interruption (HTTP range requests), one download per file however many
 * workers share the directory (an exclusive `.lock` file beside it, with the owner's pid), free disk
 * space checked before the first byte, the size and any SHA-256 (pinned by the config, or a hub's
 * ETag) checked after the last, and the GGUF header read back with its tensor data inside the file.
 *
 * node-llama-cpp's downloader (ipull) retries a server error for minutes and hides the status, so a
 * 401 or a 404 could not be told to the user in time; this is plain `fetch`.
 */
export class ModelDownload {
  private readonly done: number[] = [];
  private readonly totals: number[] = [];
  private lastProgressAt = 0;

  constructor(private readonly options: ModelDownloadOptions) {}

  /** The local path of the file to load (the first part of a split model). */
  async run(): Promise<string> {
    const { source, dir } = this.options;
    const paths = source.files.map((file) => join(dir, file));
    let arrived = false;
    for (let i = 0; i < source.urls.length; i++)
      arrived = (await this.part(i, source.urls[i] ?? '', paths[i] ?? '')) || arrived;
    // Parts already on disk were read back by the run that fetched them (a bad one is deleted there):
    // the header is read again only when a part arrived now, by this run or one it waited for.
    if (arrived) await this.verifyGguf(paths);
    return paths[0] ?? '';
  }

  /** Fetches a part unless it is on disk; true when it was not there at first (fetched now, here or by the process waited for). */
  private async part(index: number, url: string, path: string): Promise<boolean> {
    for (let waited = false; ; waited = true) {
      if (await exists(path)) {
        const size = (await stat(path)).size;
        this.done[index] = size;
        this.totals[index] = size;
        return waited;
      }
      if (await this.lock(path)) break;
      await this.waitForOwner(path, index);
    }
    try {
      await this.fetchPart(index, url, path);
    } finally {
      await unlink(`${path}.lock`).catch(() => undefined);
    }
    return true;
  }

  /** Takes the file's lock: false while another live process holds it. A dead or stale owner's lock is taken over. */
  private async lock(path: string): Promise<boolean> {
    const lockPath = `${path}.lock`;
    const owner: LockOwner = { pid: process.pid, host: hostname(), at: Date.now() };
    try {
      const handle = await open(lockPath, 'wx');
      await handle.writeFile(JSON.stringify(owner));
      await handle.close();
      return true;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    if (!(await this.stale(path))) return false;
    this.options.log(`taking over the download of ${path}: its previous owner is gone`);
    await unlink(lockPath).catch(() => undefined);
    return this.lock(path);
  }

  /**
   * A lock is stale when its owner on this host is no longer running, or when neither it nor the
   * part file has changed for `staleLockMs` (an owner on another host sharing the directory, hung).
   */
  private async stale(path: string): Promise<boolean> {
    const lockPath = `${path}.lock`;
    const text = await readFile(lockPath, 'utf8').catch(() => null);
    if (text === null) return true;
    let owner: Partial<LockOwner> = {};
    try {
      owner = JSON.parse(text) as LockOwner;
    } catch {
      // Being written this instant: judged by its age below.
    }
    if (owner.host === hostname() && typeof owner.pid === 'number' && !alive(owner.pid)) return true;
    const changed = Math.max(await mtime(lockPath), await mtime(`${path}.part`));
    return Date.now() - changed > (this.options.staleLockMs ?? 60_000);
  }

  /** Waits while another process downloads the file: until its lock is gone or stale, or the caller gives up. */
  private async waitForOwner(path: string, index: number): Promise<void> {
    this.options.log(`${path} is being downloaded by another process; waiting for it`);
    while ((await exists(`${path}.lock`)) && !(await this.stale(path))) {
      this.options.signal?.throwIfAborted();
      const part = await stat(`${path}.part`).catch(() => null);
      if (part) this.progress(index, part.size, false);
      await sleep(LOCK_POLL_MS);
    }
  }

  private async fetchPart(index: number, url: string, path: string): Promise<void> {
    const { model } = this.options;
    const partPath = `${path}.part`;
    const attempts = this.options.attempts ?? 3;
    for (let attempt = 1; ; attempt++) {
      const have = (await stat(partPath).catch(() => null))?.size ?? 0;
      const response = await this.request(url, have);
      const status = response.statusCode ?? 0;
      const range = status === 206 ? contentRange(header(response, 'content-range') ?? null) : null;
      if (status === 206 && range?.start !== have) {
        response.destroy();
        throw new CortexError(
          'model_load_failed',
          `${model}: ${url} answered a range request with bytes it was not asked for`,
        );
      }
      // A server that ignores the range sends the whole file again.
      const start = status === 206 ? have : 0;
      const length = Number(header(response, 'content-length') ?? NaN);
      const total = range?.total ?? (Number.isFinite(length) ? start + length : 0);
      this.totals[index] = total;
      this.done[index] = start;
      const expected = this.expectedSha256(response, index);
      // The body is taken from the socket now: what arrives while the disk is checked waits in memory.
      const body = new BodyQueue(response);
      try {
        if (start === 0 && have > 0) await truncate(partPath, 0);
        if (attempt === 1 && total > 0) await this.assertSpace(total - start);
      } catch (error) {
        response.destroy();
        throw error;
      }
      if (have > 0 && start > 0) this.options.log(`resuming ${url} at ${mib(start)} of ${mib(total)}`);
      try {
        await this.write(body, length, partPath, index, start);
      } catch (error) {
        this.options.signal?.throwIfAborted();
        const got = (await stat(partPath).catch(() => null))?.size ?? 0;
        if (attempt < attempts) {
          this.options.log(`the connection to ${url} dropped at ${mib(got)} of ${mib(total)}; resuming`);
          continue;
        }
        throw new CortexError(
          'model_load_failed',
          `${model}: the connection to ${url} dropped after ${got} of ${total || '?'} ` +
            `bytes (${(error as Error).message}); the next attempt resumes from there`,
          { cause: error },
        );
      }
      const size = (await stat(partPath)).size;
      if (total > 0 && size !== total) {
        throw new CortexError(
          'model_load_failed',
          `${model}: ${url} ended after ${size} of ${total} bytes; the next attempt resumes from there`,
        );
      }
      if (expected) await this.verifySha256(partPath, expected, url);
      await rename(partPath, path);
      return;
    }
  }

  /**
   * A GET of the file from byte `from`, following redirects (a hub sends its files from a CDN host;
   * the token goes to the hub only). node:http rather than fetch: the bytes that arrived before a
   * connection dropped are all handed over (a web stream drops its queue when it errors), so the
   * resume starts where the data really stopped.
   */
  private async request(url: string, from: number, hops = 0): Promise<IncomingMessage> {
    const { model, token, source } = this.options;
    const headers: Record<string, string> = { 'user-agent': 'cortex' };
    if (from > 0) headers.range = `bytes=${from}-`;
    if (token && source.hub && hops === 0) headers.authorization = `Bearer ${token}`;
    let response: IncomingMessage;
    try {
      response = await get(url, headers, this.options.signal);
    } catch (error) {
      this.options.signal?.throwIfAborted();
      throw new CortexError('model_load_failed', `${model}: cannot reach ${url}: ${(error as Error).message}`, {
        cause: error,
      });
    }
    const status = response.statusCode ?? 0;
    if (status >= 300 && status < 400 && response.headers.location) {
      response.resume();
      if (hops >= MAX_REDIRECTS)
        throw new CortexError('model_load_failed', `${model}: ${url} redirected more than ${MAX_REDIRECTS} times`);
      return this.request(new URL(response.headers.location, url).href, from, hops + 1);
    }
    if (status === 200 || status === 206) return response;
    response.resume();
    if (status === 416 && from > 0) {
      // The part file is as long as the file or longer: start over.
      await unlink(`${this.pathOf(url)}.part`).catch(() => undefined);
      return this.request(url, 0, hops);
    }
    throw new CortexError('model_load_failed', `${model}: ${httpProblem(status, url, source.hub)}`);
  }

  private pathOf(url: string): string {
    const { source, dir } = this.options;
    return join(dir, source.files[source.urls.indexOf(url)] ?? '');
  }

  /** Writes the body onto the end of the part file, reporting progress; whatever arrived before a drop is written before this rejects. */
  private async write(
    body: BodyQueue,
    expected: number,
    partPath: string,
    index: number,
    start: number,
  ): Promise<void> {
    let written = start;
    const file = createWriteStream(partPath, { flags: start > 0 ? 'a' : 'w' });
    const failure = await body.drain((chunk) => {
      written += chunk.length;
      this.progress(index, written, false);
      return file.write(chunk) ? null : new Promise<void>((resolve) => file.once('drain', resolve));
    });
    await new Promise<void>((resolve, reject) =>
      file.end((error?: Error | null) => (error ? reject(error) : resolve())),
    );
    this.progress(index, written, true);
    if (failure) throw failure;
    // A server that closes the connection cleanly but early ends the body without an error.
    if (Number.isFinite(expected) && written - start < expected)
      throw new Error(`the body ended after ${written - start} of ${expected} bytes`);
  }

  private progress(index: number, bytes: number, force: boolean): void {
    this.done[index] = bytes;
    const now = Date.now();
    if (!force && now - this.lastProgressAt < PROGRESS_EVERY_MS) return;
    this.lastProgressAt = now;
    const sum = (values: number[]): number => values.reduce((a, b) => a + (b ?? 0), 0);
    this.options.onProgress?.({ bytes: sum(this.done), totalBytes: sum(this.totals) });
  }

  /** Refuses to start a download the disk cannot hold. */
  private async assertSpace(needed: number): Promise<void> {
    const { dir, model } = this.options;
    const fs = await statfs(dir);
    const free = fs.bavail * fs.bsize;
    if (needed > free) {
      throw new CortexError(
        'model_load_failed',
        `${model}: not enough disk space in ${dir}: the download ` +
          `needs ${mib(needed)} but only ${mib(free)} is free; free ` +
          'some space or set worker.models_dir to a larger disk',
      );
    }
  }

  /** The config's pin (for an unsplit file), else a hub's ETag when it is clearly a SHA-256 (as for LFS files). */
  private expectedSha256(response: IncomingMessage, index: number): string | undefined {
    if (this.options.sha256 && this.options.source.urls.length === 1 && index === 0)
      return this.options.sha256.toLowerCase();
    const etag = header(response, 'x-linked-etag') ?? header(response, 'etag') ?? '';
    const value = etag.replace(/^W\//, '').replace(/"/g, '').toLowerCase();
    return /^[0-9a-f]{64}$/.test(value) ? value : undefined;
  }

  private async verifySha256(path: string, expected: string, url: string): Promise<void> {
    const hash = createHash('sha256');
    await pipeline(createReadStream(path), hash);
    const actual = hash.digest('hex');
    if (actual !== expected) {
      await unlink(path).catch(() => undefined);
      throw new CortexError(
        'model_load_failed',
        `${this.options.model}: ${url} is corrupted: its SHA-256 is ${actual}, expected ` +
          `${expected}; it was deleted and is downloaded again on the next attempt`,
      );
    }
  }

  /** Reads the GGUF back: a file that does not parse, or whose tensors run past its end, is deleted, never loaded. */
  private async verifyGguf(paths: string[]): Promise<void> {
    const problem = await ggufProblem(paths);
    if (!problem) return;
    await Promise.all(paths.map((path) => unlink(path).catch(() => undefined)));
    throw new CortexError(
      'model_load_failed',
      `${this.options.model}: the downloaded file is not a usable GGUF (` +
        `${problem}); it was deleted and is downloaded again on the next attempt`,
    );
  }
}

/** Why a local GGUF (every part of a split one) cannot be loaded, or null when its header and tensor data are whole. */
export async function ggufProblem(paths: readonly string[]): Promise<string | null> {
  const first = paths[0];
  if (!first) return 'no file';
  try {
    const info = await readGgufFileInfo(first, { logWarnings: false, sourceType: 'filesystem' });
    const sizes = await Promise.all(paths.map(async (path) => (await stat(path)).size));
    for (const tensor of info.fullTensorInfo ?? []) {
      const size = sizes[tensor.filePart - 1] ?? 0;
      if (Number(tensor.fileOffset) >= size)
        return (
          `tensor ${tensor.name} starts at byte ${tensor.fileOffset}, past the ` +
          `end of part ${tensor.filePart} (${size} bytes): the file is truncated`
        );
    }
    const insights = await GgufInsights.from(info);
    const total = sizes.reduce((a, b) => a + b, 0);
    if (insights.modelSize > total)
      return `its tensors take ${insights.modelSize} bytes but the file has ${total}: the file is truncated`;
    return null;
  } catch (error) {
    return (error as Error).message;
  }
}

/**
 * A response body taken from the socket as soon as the headers are in: a stream that is destroyed
 * (the connection dropped) discards what it buffered and fires its events once, so the chunks and the
 * outcome are kept here until the file is ready for them. The body flows; only the writer's
 * backpressure pauses it.
 */
class BodyQueue {
  private readonly chunks: Buffer[] = [];
  private outcome: Error | null | undefined;
  private wake: (() => void) | null = null;

  constructor(private readonly response: IncomingMessage) {
    const settle = (error: Error | null): void => {
      if (this.outcome === undefined) this.outcome = error;
      this.notify();
    };
    response.on('data', (chunk: Buffer) => {
      this.chunks.push(chunk);
      this.notify();
    });
    response.once('end', () => settle(null));
    response.once('error', (error: Error) => settle(error));
    response.once('close', () => settle(response.complete ? null : new Error('the connection closed')));
  }

  /** Hands every chunk to `write` (awaiting what it returns), until the body ends: null, or the error that ended it. */
  async drain(write: (chunk: Buffer) => Promise<void> | null): Promise<Error | null> {
    for (;;) {
      const chunk = this.chunks.shift();
      if (chunk) {
        const wait = write(chunk);
        if (wait) {
          this.response.pause();
          await wait;
          this.response.resume();
        }
        continue;
      }
      if (this.outcome !== undefined) return this.outcome;
      await new Promise<void>((resolve) => (this.wake = resolve));
    }
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }
}

export function httpProblem(status: number, url: string, hub: boolean): string {
  if (status === 401 || status === 403) {
    const token = hub ? 'set HF_TOKEN to a token that may read it' : 'give the worker a URL it may read';
    return (
      `${url} answered ${status} (${status === 401 ? 'unauthorized' : 'forbidden'}): ` +
      `${token}, or accept the model's licence on the hub`
    );
  }
  if (status === 404)
    return `${url} answered 404: no such file; check the model's "file" (repository, branch and file name)`;
  if (status >= 500) return `${url} answered ${status}: the server failed; try again later`;
  return `${url} answered ${status}`;
}

function contentRange(header: string | null): { start: number; total: number } | null {
  const match = /^bytes (\d+)-\d+\/(\d+|\*)$/.exec(header ?? '');
  if (!match) return null;
  return { start: Number(match[1]), total: match[2] === '*' ? 0 : Number(match[2]) };
}

function header(response: IncomingMessage, name: string): string | undefined {
  const value = response.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** One GET; resolves with the response once its headers are in. */
function get(url: string, headers: Record<string, string>, signal: AbortSignal | undefined): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const request = (url.startsWith('https:') ? httpsRequest : httpRequest)(
      url,
      { headers, ...(signal && { signal }) },
      resolve,
    );
    request.on('error', reject);
    request.end();
  });
}

/** Whether a process with this pid exists (EPERM: it does, as another user's). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

async function exists(path: string): Promise<boolean> {
  return (await stat(path).catch(() => null)) !== null;
}

async function mtime(path: string): Promise<number> {
  return (await stat(path).catch(() => null))?.mtimeMs ?? 0;
}

/** The sizes of a remote file's parts, from a one-byte range request each (no weights are fetched). */
export async function remoteSizes(source: RemoteSource, token: string | undefined, model: string): Promise<number[]> {
  return Promise.all(
    source.urls.map(async (url) => {
      const headers: Record<string, string> = { range: 'bytes=0-0' };
      if (token && source.hub) headers.authorization = `Bearer ${token}`;
      const response = await fetch(url, { headers }).catch((error: Error) => {
        throw new CortexError(
          'model_load_failed',
          `${model}: cannot reach ${url}: ${(error as { cause?: Error }).cause?.message ?? error.message}`,
        );
      });
      await response.body?.cancel();
      if (!response.ok)
        throw new CortexError('model_load_failed', `${model}: ${httpProblem(response.status, url, source.hub)}`);
      return (
        contentRange(response.headers.get('content-range'))?.total ??
        Number(response.headers.get('content-length') ?? 0)
      );
    }),
  );
}
