import { Inject, Injectable, Logger, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import type { KV } from '@nats-io/kv';
import { BusClient, openKv } from '@cortex/bus';
import { CONFIG, type CortexConfig } from '@cortex/config';
import { ROUTER_ID } from '../router.tokens.js';

import { Buckets } from '@cortex/contracts';

const BUCKET = Buckets.leases;
/** The holder writes its lease again this often while it loads. */
const RENEW_MS = 1_000;
/** A lease not written for this long (as this router's clock measures it) belongs to a dead router. */
const STALE_MS = 3_000;

/** What a lease is for: loading a model, or reading its header facts into the catalogue. */
export type LeasePurpose = 'load' | 'facts';

/**
 * One load per model across every router replica: a router loads a model only while it holds the
 * model's lease, a KV key created atomically (`create` fails if the key exists). The holder renews the
 * key every second; a router that dies mid-load stops renewing, and another router takes the lease
 * over once it has seen the same revision for STALE_MS (measured on its own clock, so clock skew
 * between hosts does not matter). The bucket's TTL is the last resort. A model's facts read (see
 * FactsService) has a lease of its own, in the same bucket under another key.
 */
@Injectable()
export class LoadLease implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('lease');
  private kv!: KV;
  /** Leases this router holds, by key: the revision it last wrote, and the renewal timer. */
  private readonly held = new Map<string, { revision: number; timer: NodeJS.Timeout }>();
  /** Leases other routers hold, by key: the revision last seen, and since when. */
  private readonly seen = new Map<string, { revision: number; since: number }>();

  constructor(
    private readonly bus: BusClient,
    @Inject(CONFIG) private readonly config: CortexConfig,
    @Inject(ROUTER_ID) private readonly routerId: string,
  ) {}

  async onModuleInit(): Promise<void> {
    this.kv = await openKv(this.bus.nc, BUCKET, { history: 1, ttl: this.config.gateway.placementTimeoutMs + 10_000 });
  }

  onModuleDestroy(): void {
    for (const { timer } of this.held.values()) clearInterval(timer);
  }

  async acquire(model: string, purpose: LeasePurpose = 'load'): Promise<boolean> {
    const k = key(model, purpose);
    try {
      this.hold(k, await this.kv.create(k, this.routerId), `${purpose} lease of ${model}`);
      return true;
    } catch {
      return this.takeOverStale(model, purpose, k);
    }
  }

  async release(model: string, purpose: LeasePurpose = 'load'): Promise<void> {
    const k = key(model, purpose);
    const held = this.held.get(k);
    if (held) clearInterval(held.timer);
    this.held.delete(k);
    await this.kv.purge(k);
  }

  private async takeOverStale(model: string, purpose: LeasePurpose, k: string): Promise<boolean> {
    const entry = await this.kv.get(k).catch(() => null);
    if (!entry || entry.operation !== 'PUT') return false;
    const now = Date.now();
    const seen = this.seen.get(k);
    if (seen?.revision !== entry.revision) {
      this.seen.set(k, { revision: entry.revision, since: now });
      return false;
    }
    if (now - seen.since < STALE_MS) return false;
    try {
      // Only if nobody wrote it since: a live holder's renewal, or another router's takeover, wins.
      this.hold(k, await this.kv.update(k, this.routerId, entry.revision), `${purpose} lease of ${model}`);
    } catch {
      return false;
    }
    this.seen.delete(k);
    this.logger.warn(`took over the ${purpose} lease of ${model} from ${entry.string()}, which stopped renewing it`);
    return true;
  }

  private hold(k: string, revision: number, what: string): void {
    const held = { revision, timer: setInterval(() => this.renew(k, what), RENEW_MS) };
    held.timer.unref();
    this.held.set(k, held);
  }

  private renew(k: string, what: string): void {
    const held = this.held.get(k);
    if (!held) return;
    this.kv.update(k, this.routerId, held.revision).then(
      (revision) => {
        held.revision = revision;
      },
      (error: Error) => this.logger.warn(`could not renew the ${what}: ${error.message}`),
    );
  }
}

/** KV keys allow only a few characters; model ids may hold more (`org/model:q4`). */
function key(model: string, purpose: LeasePurpose): string {
  return `${purpose}.${Buffer.from(model).toString('base64url')}`;
}
