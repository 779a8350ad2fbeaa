import { Module, type DynamicModule } from '@nestjs/common';
import type { NatsConnection } from '@nats-io/transport-node';
import { BusClient } from './bus.client.js';

/** Makes one process-wide `BusClient` injectable everywhere. */
@Module({})
export class BusModule {
  static forRoot(nc: NatsConnection, requestTimeoutMs: number): DynamicModule {
    return {
      module: BusModule,
      global: true,
      providers: [{ provide: BusClient, useValue: new BusClient(nc, requestTimeoutMs) }],
      exports: [BusClient],
    };
  }
}
