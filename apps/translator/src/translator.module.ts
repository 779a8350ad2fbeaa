import { Module, type DynamicModule } from '@nestjs/common';
import type { NatsConnection } from '@nats-io/transport-node';
import { BusModule } from '@cortex/bus';
import { CONFIG, type CortexConfig } from '@cortex/config';
import { BackgroundResponses } from './responses/responses.background.js';
import { ResponsesService } from './responses/responses.service.js';
import { ResponsesStore } from './responses/responses.store.js';
import { TranslatorController } from './translator.controller.js';

@Module({})
export class TranslatorModule {
  static register(config: CortexConfig, nc: NatsConnection): DynamicModule {
    return {
      module: TranslatorModule,
      imports: [BusModule.forRoot(nc, config.nats.requestTimeoutMs)],
      controllers: [TranslatorController],
      providers: [{ provide: CONFIG, useValue: config }, ResponsesStore, ResponsesService, BackgroundResponses],
    };
  }
}
