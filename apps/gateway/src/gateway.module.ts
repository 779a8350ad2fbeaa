import { Logger, Module, type DynamicModule } from '@nestjs/common';
import type { NatsConnection } from '@nats-io/transport-node';
import { BusModule, ModelCatalogue } from '@cortex/bus';
import { CONFIG, type CortexConfig } from '@cortex/config';
import { HealthController } from './health/health.controller.js';
import { InferenceService } from './inference/inference.service.js';
import { ModelsController } from './models/models.controller.js';
import { ChatController } from './openai/chat.controller.js';
import { CompletionsController } from './completions/completions.controller.js';
import { MessagesController } from './anthropic/messages.controller.js';
import { ResponsesController } from './responses/responses.controller.js';
import { BackgroundResponder } from './responses/responses.background.js';
import { AdminController } from './admin/admin.controller.js';
import { KeysController } from './admin/keys.controller.js';
import { KeyDirectory } from './keys/key-directory.js';
import { LimitsBucket } from './limits/limits-bucket.js';
import { RateLimiter } from './limits/rate-limiter.js';
import { TokenRateLimiter } from './limits/token-rate-limiter.js';
import { BudgetLedger } from './limits/budget-ledger.js';
import { KeyAdmission } from './limits/key-admission.js';
import { FinalWrites } from './usage/final-writes.js';
import { UsageRecorder } from './usage/usage-recorder.js';
import { UsageController } from './admin/usage.controller.js';
import { InferenceResponder } from './inference/inference.responder.js';
import { ResponsesSocket } from './responses/ws/responses.socket.js';
import { RetrievalController } from './retrieval/retrieval.controller.js';
import { RetrievalService } from './retrieval/retrieval.service.js';
import { ConsoleController } from './console/console.controller.js';
import { ConsoleHub } from './console/console.hub.js';
import { RefusalCounter } from './http/refusals.js';
import { HeldBytes } from './http/upload-slots.js';
import { McpService } from './mcp/mcp.service.js';
import { McpLoops } from './mcp/mcp-loops.js';

@Module({})
export class GatewayModule {
  static register(config: CortexConfig, nc: NatsConnection): DynamicModule {
    return {
      module: GatewayModule,
      imports: [BusModule.forRoot(nc, config.nats.requestTimeoutMs)],
      controllers: [
        ChatController,
        CompletionsController,
        ResponsesController,
        MessagesController,
        ModelsController,
        HealthController,
        AdminController,
        KeysController,
        UsageController,
        RetrievalController,
        ConsoleController,
      ],
      providers: [
        { provide: CONFIG, useValue: config },
        {
          provide: ModelCatalogue,
          useFactory: () =>
            ModelCatalogue.open(nc, config, (error) =>
              new Logger('catalogue').warn(`catalogue watch: ${error.message}; watching again`),
            ),
        },
        InferenceService,
        InferenceResponder,
        RetrievalService,
        BackgroundResponder,
        ResponsesSocket,
        RefusalCounter,
        HeldBytes,
        KeyDirectory,
        LimitsBucket,
        RateLimiter,
        TokenRateLimiter,
        BudgetLedger,
        KeyAdmission,
        UsageRecorder,
        FinalWrites,
        ConsoleHub,
        McpService,
        McpLoops,
      ],
    };
  }
}
