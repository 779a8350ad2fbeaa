import { Injectable, Logger, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import type { KV } from '@nats-io/kv';
import { BusClient, openKv, watchKv } from '@cortex/bus';

import { Buckets } from '@cortex/contracts';
const BUCKET = Buckets.pins;

/**
 * Pins set at run time (`cortex pin`), shared by every router through KV and watched, so a pin made
 * through one router holds in all of them and survives restarts. The config's `pinned` is the default.
 */
@Injectable()
export class PinStore implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('pins');
  private readonly pins = new Map<string, boolean>();
  private kv!: KV;
  private stopWatch: (() => void) | null = null;

  constructor(private readonly bus: BusClient) {}

  async onModuleInit(): Promise<void> {
    this.kv = await openKv(this.bus.nc, BUCKET, { history: 1 });
    this.stopWatch = watchKv(
      this.kv,
      (entry) => {
        const model = Buffer.from(entry.key, 'base64url').toString();
        if (entry.operation === 'PUT') this.pins.set(model, entry.string() === '1');
        else this.pins.delete(model);
      },
      (error) => this.logger.warn(`pin watch: ${error.message}; watching again`),
    );
  }

  onModuleDestroy(): void {
    this.stopWatch?.();
  }

  isPinned(model: string, configured: boolean): boolean {
    return this.pins.get(model) ?? configured;
  }

  async set(model: string, pinned: boolean): Promise<void> {
    await this.kv.put(Buffer.from(model).toString('base64url'), pinned ? '1' : '0');
    this.pins.set(model, pinned);
  }
}
