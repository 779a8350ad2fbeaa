import { Inject, Injectable, type OnModuleInit } from '@nestjs/common';
import { Kvm, type KV } from '@nats-io/kv';
import { BusClient } from '@cortex/bus';
import { CONFIG, type CortexConfig } from '@cortex/config';
import { ROUTER_ID } from '../router.tokens.js';

import { Buckets } from '@cortex/contracts';
const BUCKET = Buckets.leases;

/**
 * One load per model across every router replica: a router loads a model only while it holds the
 * model's lease, a KV key created atomically (`create` fails if the key exists). A router that dies
 * mid-load leaves a lease that expires with the bucket's TTL, so the model is not blocked for ever.
 */
@Injectable()
export class LoadLease implements OnModuleInit {
  private kv!: KV;

  constructor(
    private readonly bus: BusClient,
    @Inject(CONFIG) private readonly config: CortexConfig,
    @Inject(ROUTER_ID) private readonly routerId: string,
  ) {}

  async onModuleInit(): Promise<void> {
    this.kv = await new Kvm(this.bus.nc).create(BUCKET, { history: 1, ttl: this.config.gateway.placementTimeoutMs + 10_000 });
  }

  async acquire(model: string): Promise<boolean> {
    try {
      await this.kv.create(key(model), this.routerId);
      return true;
    } catch {
      return false;
    }
  }

  async release(model: string): Promise<void> {
    await this.kv.purge(key(model));
  }
}

/** KV keys allow only a few characters; model ids may hold more (`org/model:q4`). */
function key(model: string): string {
  return `load.${Buffer.from(model).toString('base64url')}`;
}
