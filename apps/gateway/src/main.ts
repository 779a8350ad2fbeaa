import { startHttpApp, type ServiceStart } from '@cortex/bus';
import { GatewayModule } from './gateway.module.js';
import { ApiExceptionFilter } from './http/api-exception.filter.js';
import { installAccess, installModelAccess } from './http/access.js';
import { KeyDirectory } from './keys/key-directory.js';
import { RateLimiter } from './limits/rate-limiter.js';
import { TokenRateLimiter } from './limits/token-rate-limiter.js';
import { installRateLimits } from './http/rate-limits.js';
import { installPriority } from './http/priority.js';
import { PriorityBook } from './priority/priority-book.js';
import { BudgetLedger } from './limits/budget-ledger.js';
import { UsageRecorder } from './usage/usage-recorder.js';
import { InferenceService } from './inference/inference.service.js';
import { installArrival } from './http/arrival.js';
import { installBodyDepth } from './http/body-depth.js';
import { drainBudget, installOversizeDrain } from './http/oversize-drain.js';
import { ResponsesSocket } from './responses/ws/responses.socket.js';

export const start: ServiceStart = async (context) => {
  const { config } = context;
  const running = await startHttpApp(GatewayModule.register(config, context.nc), {
    service: 'gateway',
    context,
    queue: 'gateway',
    listen: config.gateway.listen,
    bodyLimit: config.gateway.bodyLimitBytes,
    configure: (app) => {
      app.useGlobalFilters(new ApiExceptionFilter());
      const fastify = app.getHttpAdapter().getInstance();
      installArrival(fastify);
      installAccess(fastify, config, context.logger, app.get(KeyDirectory));
      installBodyDepth(fastify);
      installOversizeDrain(fastify, drainBudget(config.gateway.bodyLimitBytes));
      installModelAccess(fastify);
      installPriority(fastify, config, app.get(PriorityBook));
      const inference = app.get(InferenceService);
      installRateLimits(fastify, { limiter: app.get(RateLimiter), tokens: app.get(TokenRateLimiter), budgets: app.get(BudgetLedger), directory: app.get(KeyDirectory), usage: app.get(UsageRecorder), contextSizeOf: (model) => inference.modelConfig(model)?.contextSize });
      app.get(ResponsesSocket).install(fastify);
    },
  });
  context.logger.log(`gateway listening on http://${config.gateway.listen}`, 'gateway');
  return running;
};
