import { startHttpApp, type ServiceStart } from '@cortex/bus';
import { GatewayModule } from './gateway.module.js';
import { ApiExceptionFilter } from './http/api-exception.filter.js';
import { sendError, toCortexError } from './http/error-response.js';
import { requestIdOf } from './http/request-id.js';

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
      // Body parsing fails before any controller runs (bad JSON, too large): answer in the API's shape.
      fastify.setErrorHandler((error, request, reply) => sendError(reply, request.url, toCortexError(error), requestIdOf(request)));
    },
  });
  context.logger.log(`gateway listening on http://${config.gateway.listen}`, 'gateway');
  return running;
};
