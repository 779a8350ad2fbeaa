import { freemem, totalmem } from 'node:os';
import { performance } from 'node:perf_hooks';
import type { CanonicalRequest, ModelCapabilities, ModelFacts } from '@cortex/contracts';
import type { Engine, EngineModel, GenerateJob, ModelSpec } from './engine.types.js';
import { promptBytes } from './prompt-bound.js';
import { chargedTokens, ticketOf } from './fair-queue.js';
import { SlotPool } from './slot-pool.js';

/** The text of every synthetic token: one short word, so a client can count tokens in the text. */
export const SYNTHETIC_TOKEN = ' tok';
/** Tokens a request without `max_tokens` gets. */
const DEFAULT_TOKENS = 256;
const MIB = 2 ** 20;

/**
 * An engine without llama.cpp, for measuring cortex's own pipeline (bus, gateway, SSE): every loaded
 * model emits `SYNTHETIC_TOKEN` at `tokensPerSecond` per stream, in steps shared by all its streams
 * as in continuous batching. Selected by `worker.engine: synthetic`; the model file is not read.
 */
export class SyntheticEngine implements Engine {
  readonly backend = 'synthetic';

  constructor(private readonly tokensPerSecond: number) {}

  resolveSource(source: string): Promise<string> {
    return Promise.resolve(source);
  }

  device(): Promise<{ name: string; kind: string; totalBytes: number; freeBytes: number }> {
    return Promise.resolve({ name: 'synthetic', kind: 'cpu', totalBytes: totalmem(), freeBytes: freemem() });
  }

  estimate(): Promise<number> {
    return Promise.resolve(MIB);
  }

  facts(): Promise<ModelFacts> {
    return Promise.resolve({});
  }

  load(spec: ModelSpec, onProgress?: (fraction: number) => void): Promise<EngineModel> {
    onProgress?.(1);
    return Promise.resolve(new SyntheticModel(spec, this.tokensPerSecond));
  }

  restart(): Promise<void> {
    return Promise.resolve();
  }

  dispose(): Promise<void> {
    return Promise.resolve();
  }
}

interface Stream {
  job: GenerateJob;
  emitted: number;
  maxTokens: number;
  firstTokenAt: number;
  startedAt: number;
  done: () => void;
}

class SyntheticModel implements EngineModel {
  readonly id: string;
  readonly slots: number;
  readonly sizeBytes = MIB;
  readonly format = null;
  readonly capabilities: ModelCapabilities = { tools: false, reasoning: false, vision: false };
  private readonly pool: SlotPool<number>;
  private readonly streams = new Set<Stream>();
  private timer: NodeJS.Timeout | null = null;
  private readonly stepMs: number;

  constructor(spec: ModelSpec, tokensPerSecond: number) {
    this.id = spec.id;
    this.slots = spec.slots;
    this.pool = new SlotPool(
      Array.from({ length: spec.slots }, (_, i) => i),
      spec.maxQueue,
      spec.queueOrder,
    );
    this.stepMs = 1000 / tokensPerSecond;
  }

  get inFlight(): number {
    return this.pool.inUse;
  }

  get queued(): number {
    return this.pool.queued;
  }

  countTokens(request: CanonicalRequest): number {
    return Math.max(1, Math.ceil(promptBytes(request) / 4));
  }

  async generate(job: GenerateJob): Promise<void> {
    const slot = await this.pool.acquire(job.signal, undefined, ticketOf(job.priority, this.countTokens(job.request)));
    let cost: number | undefined;
    try {
      await new Promise<void>((ended) => {
        const done = (): void => {
          cost = chargedTokens({
            promptTokens: this.countTokens(job.request),
            cachedPromptTokens: 0,
            completionTokens: stream.emitted,
          });
          ended();
        };
        const stream: Stream = {
          job,
          emitted: 0,
          maxTokens: job.request.sampling.maxTokens ?? DEFAULT_TOKENS,
          firstTokenAt: 0,
          startedAt: performance.now(),
          done,
        };
        job.emit({ type: 'start', model: this.id, promptTokens: this.countTokens(job.request) });
        this.streams.add(stream);
        this.schedule();
      });
    } finally {
      this.pool.release(slot, cost);
    }
  }

  /** One step for every stream: the tokens each is due by now (one, unless the event loop was late). */
  private step = (): void => {
    this.timer = null;
    const now = performance.now();
    for (const stream of this.streams) {
      if (stream.job.signal.aborted) {
        this.finish(stream, 'cancelled', now);
        continue;
      }
      const due = Math.min(stream.maxTokens, Math.max(1, Math.floor((now - stream.startedAt) / this.stepMs)));
      if (due > stream.emitted) {
        if (stream.emitted === 0) stream.firstTokenAt = now;
        stream.job.emit({ type: 'text', text: SYNTHETIC_TOKEN.repeat(due - stream.emitted) });
        stream.emitted = due;
      }
      if (stream.emitted >= stream.maxTokens) this.finish(stream, 'length', now);
    }
    this.schedule();
  };

  private schedule(): void {
    if (this.timer || this.streams.size === 0) return;
    this.timer = setTimeout(this.step, this.stepMs);
  }

  private finish(stream: Stream, reason: 'length' | 'cancelled', now: number): void {
    this.streams.delete(stream);
    const { job, emitted, firstTokenAt } = stream;
    const decodeSeconds = firstTokenAt ? (now - firstTokenAt) / 1000 : 0;
    job.emit({
      type: 'finish',
      reason,
      usage: {
        promptTokens: this.countTokens(job.request),
        cachedPromptTokens: 0,
        completionTokens: emitted,
        reasoningTokens: 0,
      },
      timings: {
        ttftMs: firstTokenAt ? firstTokenAt - job.receivedAt : 0,
        promptMs: 0,
        decodeTokensPerSecond: decodeSeconds > 0 && emitted > 1 ? (emitted - 1) / decodeSeconds : 0,
        durationMs: now - job.receivedAt,
        queueMs: stream.startedAt - job.receivedAt,
      },
    });
    stream.done();
  }

  dispose(): Promise<void> {
    for (const stream of this.streams) this.finish(stream, 'cancelled', performance.now());
    return Promise.resolve();
  }
}
