import { freemem, totalmem } from 'node:os';
import { performance } from 'node:perf_hooks';
import {
  CortexError,
  REMOTE_DEVICE,
  type CanonicalRequest,
  type FinishReason,
  type ModelCapabilities,
  type ModelFacts,
  type UnreachableUpstream,
  type Usage,
  upstreamCapabilities,
} from '@cortex/contracts';
import { UPSTREAM_CODECS, type UpstreamCodec, type UpstreamUsage } from '@cortex/wire';
import type { Engine, EngineModel, GenerateJob, ModelSpec } from '../engine.types.js';
import { promptBytes } from '../prompt-bound.js';
import { chargedTokens, ticketOf } from '../fair-queue.js';
import { SlotPool } from '../slot-pool.js';
import { UpstreamClient } from './upstream-client.js';
import { upstreamRefusal } from './upstream-failure.js';

/**
 * The engine of a remote worker (`worker.engine: remote`): no device and no weights; each catalogue
 * model with an `upstream` is served by posting its requests to that server or API in its own wire
 * format and reading its streamed answer back into stream events, so everything past the worker —
 * placement, limits, usage, every client dialect — treats it as any model. A model without an
 * upstream is refused at load.
 */
export class RemoteEngine implements Engine {
  readonly backend = REMOTE_DEVICE;

  resolveSource(source: string): Promise<string> {
    return Promise.resolve(source);
  }

  device(): Promise<{ name: string; kind: string; totalBytes: number; freeBytes: number }> {
    return Promise.resolve({ name: 'upstreams', kind: REMOTE_DEVICE, totalBytes: totalmem(), freeBytes: freemem() });
  }

  estimate(): Promise<number> {
    return Promise.resolve(0);
  }

  facts(): Promise<ModelFacts> {
    return Promise.resolve({});
  }

  async load(spec: ModelSpec, onProgress?: (fraction: number) => void): Promise<EngineModel> {
    if (!spec.upstream)
      throw new CortexError(
        'model_load_failed',
        `${spec.id} has a file, not an upstream: a remote worker serves only upstream models; run it on a worker ` +
          'with worker.engine: llama',
      );
    const { upstream } = spec;
    const client = await UpstreamClient.create(upstream, spec.id);
    onProgress?.(1);
    return new RemoteModel({ ...spec, upstream }, client);
  }

  restart(): Promise<void> {
    return Promise.resolve();
  }

  dispose(): Promise<void> {
    return Promise.resolve();
  }
}

/** One upstream model: at most `max_concurrency` requests at the upstream at once, the rest in the worker's fair queue. */
class RemoteModel implements EngineModel {
  readonly id: string;
  readonly slots: number;
  readonly sizeBytes = 0;
  readonly format: string;
  readonly capabilities: ModelCapabilities;
  private readonly pool: SlotPool<number>;
  private readonly codec: UpstreamCodec;
  private readonly name: string;
  private readonly reasoning: boolean;
  private readonly runs = new Set<AbortController>();

  constructor(
    spec: ModelSpec & { upstream: NonNullable<ModelSpec['upstream']> },
    private readonly client: UpstreamClient,
  ) {
    const { upstream } = spec;
    this.id = spec.id;
    this.slots = spec.slots;
    this.pool = new SlotPool(
      Array.from({ length: spec.slots }, (_, i) => i),
      spec.maxQueue,
      spec.queueOrder,
    );
    this.codec = UPSTREAM_CODECS[upstream.api];
    this.name = upstream.model ?? spec.id;
    this.reasoning = upstream.reasoning;
    const capabilities = upstreamCapabilities(upstream);
    this.capabilities = capabilities;
    this.format = capabilities.format;
  }

  get inFlight(): number {
    return this.pool.inUse;
  }

  get unreachable(): UnreachableUpstream | null {
    return this.client.unreachable;
  }

  get queued(): number {
    return this.pool.queued;
  }

  /** An estimate (a token is about 4 bytes of text): the upstream's tokenizer is not here. Usage counts what it reports. */
  countTokens(request: CanonicalRequest): number {
    return Math.max(1, Math.ceil(promptBytes(request) / 4));
  }

  async generate(job: GenerateJob): Promise<void> {
    const { request } = job;
    if (job.resume)
      throw new CortexError(
        'model_not_ready',
        `${this.id} is served by an upstream, which cannot resume by token ids (a stream goes on there from its text)`,
      );
    // Refused before a slot is taken: what the upstream's format cannot carry is the request's fault.
    const body = this.codec.encode(request, { model: this.name, reasoning: this.reasoning });
    let heldBack = body.heldBack ?? '';
    const estimate = this.countTokens(request);
    const slot = await this.pool.acquire(job.signal, undefined, ticketOf(job.priority, estimate));
    const started = performance.now();
    let reported: UpstreamUsage = {};
    const output = new OutputEstimate();
    let firstAt = 0;
    let reason: Exclude<FinishReason, 'cancelled' | 'error'> = 'stop';
    let stopSequence: string | undefined;
    const run = new AbortController();
    const cancel = (): void => run.abort(job.signal.reason);
    job.signal.addEventListener('abort', cancel, { once: true });
    this.runs.add(run);
    try {
      job.emit({ type: 'start', model: this.id, promptTokens: estimate });
      for await (const event of this.client.stream(body, this.codec.decoder(), run.signal)) {
        switch (event.type) {
          case 'usage':
            reported = { ...reported, ...event.usage };
            continue;
          case 'finish':
            reason = event.reason;
            stopSequence = event.stopSequence;
            continue;
          case 'error':
            // An error the upstream wrote into its stream is read by the same table as a refused request.
            throw event.status === undefined
              ? new CortexError('upstream_unavailable', `the upstream ${this.client.label} failed: ${event.message}`)
              : upstreamRefusal({ status: event.status, message: event.message, upstream: this.client.label });
          case 'text': {
            // White space the prefill could not carry comes back first: the client has it already.
            const text = heldBack ? afterHeldBack(heldBack, event.text) : event.text;
            if (heldBack) heldBack = text === '' ? heldBack.slice(event.text.length) : '';
            if (text === '') continue;
            if (firstAt === 0) firstAt = performance.now();
            output.add(text);
            job.emit(text === event.text ? event : { type: 'text', text });
            continue;
          }
          default:
            if (firstAt === 0) firstAt = performance.now();
            output.add(event.type === 'reasoning' ? event.text : event.type === 'tool_args' ? event.delta : '');
            job.emit(event);
        }
      }
      const cancelled = run.signal.aborted;
      const usage = used(reported, estimate, output.tokens);
      const now = performance.now();
      const decodeSeconds = firstAt ? (now - firstAt) / 1000 : 0;
      job.emit({
        type: 'finish',
        reason: cancelled ? 'cancelled' : reason,
        usage,
        timings: {
          ttftMs: firstAt ? firstAt - job.receivedAt : 0,
          promptMs: firstAt ? firstAt - started : 0,
          decodeTokensPerSecond:
            decodeSeconds > 0 && usage.completionTokens > 1 ? (usage.completionTokens - 1) / decodeSeconds : 0,
          durationMs: now - job.receivedAt,
          queueMs: started - job.receivedAt,
        },
        ...(stopSequence !== undefined && !cancelled && { stopSequence }),
      });
    } finally {
      job.signal.removeEventListener('abort', cancel);
      this.runs.delete(run);
      // Also a stream cancelled or broken before its usage came costs its account what it was given.
      this.pool.release(slot, chargedTokens(used(reported, estimate, output.tokens)));
    }
  }

  dispose(): Promise<void> {
    this.client.close();
    for (const run of this.runs) run.abort(new CortexError('cancelled', `${this.id} was unloaded`));
    return Promise.resolve();
  }
}

/**
 * The tokens of the output given, where the upstream reports none (a stream cancelled or broken before
 * its usage): a piece each at least, and four bytes a token (as the prompt is estimated), since an
 * upstream may send many tokens in one delta.
 */
export class OutputEstimate {
  private pieces = 0;
  private bytes = 0;

  add(text: string): void {
    this.pieces++;
    this.bytes += Buffer.byteLength(text);
  }

  get tokens(): number {
    return Math.max(this.pieces, Math.ceil(this.bytes / 4));
  }
}

/** A run's usage: what the upstream reported, else the estimated prompt and output. */
function used(reported: UpstreamUsage, promptTokens: number, outputTokens: number): Usage {
  return {
    promptTokens: reported.promptTokens ?? promptTokens,
    cachedPromptTokens: reported.cachedPromptTokens ?? 0,
    completionTokens: reported.completionTokens ?? outputTokens,
    reasoningTokens: reported.reasoningTokens ?? 0,
  };
}

/** `text` without the start it shares with `heldBack`: what the client lacks of an answer's first text. */
export function afterHeldBack(heldBack: string, text: string): string {
  let shared = 0;
  while (shared < heldBack.length && shared < text.length && heldBack[shared] === text[shared]) shared++;
  return text.slice(shared);
}
