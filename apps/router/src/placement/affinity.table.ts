import { createHash } from 'node:crypto';
import { Inject, Injectable, Logger, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import type { KV } from '@nats-io/kv';
import { BusClient, openKv, watchKv } from '@cortex/bus';
import { CONFIG, type CortexConfig } from '@cortex/config';

import { Buckets } from '@cortex/contracts';
const BUCKET = Buckets.affinity;
/** Bindings one router keeps in memory; the oldest go first (KV keeps them for every router). */
const MAX_BINDINGS = 100_000;
/**
 * The bucket's bound (~500,000 bindings): every request without a session key writes one. Past it new ones are refused
 * until old ones age out.
 */
const MAX_BUCKET_BYTES = 64 * 2 ** 20;
/** The longest a starting router waits for its watch to hold the bindings the bucket has. */
const CATCH_UP_MS = 5_000;

interface Binding {
  workerId: string;
  /** When the binding was last written to KV (epoch ms). */
  at: number;
}

/**
 * Which worker served a conversation last, per model: follow-ups go there so the worker reuses the prompt prefix it
 * still holds. A conversation is named by its affinity key, or by the digest of a request's whole prompt (`prefixKey`),
 * which its follow-up finds among its own prompt's prefixes. Bindings live in the KV bucket `cortex_affinity` (TTL
 * `router.affinity_ttl_s`), watched by every router, so any replica routes a follow-up the same way and a restarted
 * router loses nothing. A binding is written only when it changes, or when half its TTL has passed, so a steady
 * conversation costs no writes.
 */
@Injectable()
export class AffinityTable implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('affinity');
  private readonly bindings = new Map<string, Binding>();
  private kv: KV | null = null;
  private stopWatch: (() => void) | null = null;
  private warned = -Infinity;

  constructor(
    private readonly bus: BusClient,
    @Inject(CONFIG) private readonly config: CortexConfig,
  ) {}

  async onModuleInit(): Promise<void> {
    if (!this.config.router.affinity) return;
    this.kv = await openKv(this.bus.nc, BUCKET, {
      history: 1,
      ttl: this.config.router.affinityTtlS * 1000,
      max_bytes: MAX_BUCKET_BYTES,
    });
    // A router that (re)starts places nothing before its watch has delivered the bindings the bucket
    // holds (the last of them comes with nothing pending): a follow-up placed before then would go to
    // any worker, not the one that holds its prompt.
    let read: () => void = () => undefined;
    const initial = new Promise<void>((done) => (read = done));
    this.stopWatch = watchKv(
      this.kv,
      (entry) => {
        if (entry.operation === 'PUT') this.bind(entry.key, { workerId: entry.string(), at: entry.created.getTime() });
        else this.bindings.delete(entry.key);
        if (entry.delta === 0 || entry.isUpdate) read();
      },
      (error) => this.logger.warn(`affinity watch: ${error.message}; watching again`),
    );
    if ((await this.kv.status()).values === 0) read();
    let timer: NodeJS.Timeout | undefined;
    const bounded = new Promise<boolean>((done) => (timer = setTimeout(() => done(false), CATCH_UP_MS)));
    const complete = await Promise.race([initial.then(() => true), bounded]);
    clearTimeout(timer);
    if (!complete)
      this.logger.warn(
        `the affinity bindings were not all read within ${CATCH_UP_MS / 1000} s; placing without the rest`,
      );
  }

  onModuleDestroy(): void {
    this.stopWatch?.();
  }

  /**
   * The worker that served a request of this model whose whole prompt is the longest of `prefixes`
   * (longest first) it remembers.
   */
  workerForPrefix(prefixes: readonly string[], model: string): string | undefined {
    for (const prefix of prefixes) {
      const workerId = this.workerFor(prefixKey(prefix), model);
      if (workerId) return workerId;
    }
    return undefined;
  }

  /** The worker that last served this conversation with this model, if it is still remembered. */
  workerFor(affinity: string, model: string): string | undefined {
    const binding = this.bindings.get(bindingKey(affinity, model));
    if (!binding || Date.now() - binding.at > this.config.router.affinityTtlS * 1000) return undefined;
    return binding.workerId;
  }

  remember(affinity: string, model: string, workerId: string): void {
    if (!this.kv) return;
    const key = bindingKey(affinity, model);
    const known = this.bindings.get(key);
    const now = Date.now();
    if (known?.workerId === workerId && now - known.at < (this.config.router.affinityTtlS * 1000) / 2) return;
    this.bind(key, { workerId, at: now });
    this.kv.put(key, workerId).catch((error: Error) => {
      // A full bucket refuses every write until its bindings age out: said once a minute, not per request.
      if (now - this.warned < 60_000) return;
      this.warned = now;
      this.logger.warn(`could not store an affinity binding (placement goes on without it): ${error.message}`);
    });
  }

  private bind(key: string, binding: Binding): void {
    this.bindings.delete(key);
    this.bindings.set(key, binding);
    if (this.bindings.size > MAX_BINDINGS) this.bindings.delete(this.bindings.keys().next().value as string);
  }
}

/** A prompt prefix's binding, apart from affinity keys (which carry a source prefix such as `session:`). */
export function prefixKey(prefix: string): string {
  return `prefix:${prefix}`;
}

/** KV keys allow few characters, and affinity keys are client text: a digest of model and key. */
function bindingKey(affinity: string, model: string): string {
  return `a.${createHash('sha256').update(model).update('\0').update(affinity).digest('base64url').slice(0, 32)}`;
}
