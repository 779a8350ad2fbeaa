import { Module, type DynamicModule } from '@nestjs/common';
import type { NatsConnection } from '@nats-io/transport-node';
import { BusModule } from '@cortex/bus';
import { CONFIG, type CortexConfig } from '@cortex/config';
import { MetricsController } from './metrics.controller.js';
import { MetricsService } from './metrics.service.js';

@Module({})
export class MetricsModule {
  static register(config: CortexConfig, nc: NatsConnection): DynamicModule {
    return {
      module: MetricsModule,
      imports: [BusModule.forRoot(nc, config.nats.requestTimeoutMs)],
      controllers: [MetricsController],
      providers: [{ provide: CONFIG, useValue: config }, MetricsService],
    };
  }
}
