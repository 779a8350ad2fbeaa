import { Injectable, type OnModuleInit } from '@nestjs/common';
import type { KV } from '@nats-io/kv';
import { BusClient, openKv } from '@cortex/bus';
import { Buckets } from '@cortex/contracts';
import { casChange } from './kv-cas.js';

/**
 * The KV bucket `cortex_limits`, opened once per gateway for every limit kept in it (request windows
 * and leases, tokens per minute, token budgets), each entry changed by compare-and-set.
 */
@Injectable()
export class LimitsBucket implements OnModuleInit {
  private kv: KV | null = null;

  constructor(private readonly bus: BusClient) {}

  async onModuleInit(): Promise<void> {
    this.kv = await openKv(this.bus.nc, Buckets.limits, {
      history: 1,
      description: 'cortex: rate-limit state of keys and accounts',
    });
  }

  /** Reads `entry`, lets `edit` decide, and writes its `next` only over the revision read (see kv-cas.ts). */
  change<S, R>(entry: string, empty: S, edit: (state: S, now: number) => { next: S | null; result: R }): Promise<R> {
    return casChange(this.kv, entry, empty, edit);
  }

  /** The entry's state now (`empty` when it has none, or while the bucket is not open yet). */
  async read<S>(entry: string, empty: S): Promise<S> {
    const found = this.kv ? await this.kv.get(entry) : null;
    return found?.operation === 'PUT' ? found.json<S>() : empty;
  }
}
