import { Module, type DynamicModule } from '@nestjs/common';
import type { NatsConnection } from '@nats-io/transport-node';
import { BusModule } from '@cortex/bus';
import { CONFIG, type CortexConfig } from '@cortex/config';
import type { Engine } from './engine/index.js';
import { WorkerController } from './worker.controller.js';
import { WorkerService } from './worker.service.js';
import { ENGINE, WORKER_ID } from './worker.tokens.js';

@Module({})
export class WorkerModule {
  static register(config: CortexConfig, nc: NatsConnection, engine: Engine, workerId: string): DynamicModule {
    return {
      module: WorkerModule,
      imports: [BusModule.forRoot(nc, config.nats.requestTimeoutMs)],
      controllers: [WorkerController],
      providers: [
        { provide: CONFIG, useValue: config },
        { provide: ENGINE, useValue: engine },
        { provide: WORKER_ID, useValue: workerId },
        WorkerService,
      ],
    };
  }
}
