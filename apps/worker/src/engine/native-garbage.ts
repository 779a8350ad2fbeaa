import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

type Collect = (options: { type: 'major'; execution: 'async' }) => void;

/**
 * Memory a finished generation leaves behind where V8 cannot see it. node-llama-cpp creates a sampler
 * per evaluation whose native side keeps a candidates array as long as the vocabulary (12 bytes per
 * token) until its small JS object is garbage-collected — `dispose()` frees the samplers, not that
 * array — and V8 is not told about it, so it collects those objects only when the JS heap itself
 * grows. Under steady load that held about a gigabyte in a worker whose model needs tens of
 * megabytes (`npm run bench:memory`). This counts what finished generations left and, past
 * `worker.native_gc_mb`, asks V8 for a major collection, run as a task of its own rather than inside
 * the caller.
 */
export class NativeGarbage {
  private owed = 0;

  constructor(
    private readonly thresholdBytes: number,
    private readonly collect: Collect | null = thresholdBytes > 0 ? exposedGc() : null,
  ) {}

  /** Collections asked for so far (for logs and tests). */
  collections = 0;

  /** A generation ended, leaving `bytes` of native memory that only a collection frees. */
  left(bytes: number): void {
    if (!this.collect) return;
    this.owed += bytes;
    if (this.owed < this.thresholdBytes) return;
    this.owed = 0;
    this.collections++;
    this.collect({ type: 'major', execution: 'async' });
  }
}

/** V8's `gc` function, exposed for this process without a command line flag. */
function exposedGc(): Collect {
  setFlagsFromString('--expose-gc');
  return runInNewContext('gc') as Collect;
}

/** What one evaluation's sampler keeps of a model with `vocabulary` tokens (llama_token_data: id, logit, p). */
export function samplerBytes(vocabulary: number): number {
  return vocabulary * 12;
}
