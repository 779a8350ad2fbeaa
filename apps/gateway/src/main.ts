import { startHttpApp, type ServiceStart } from '@cortex/bus';
import { GatewayModule } from './gateway.module.js';
import { ApiExceptionFilter } from './http/api-exception.filter.js';
import { installAccess, installModelAccess } from './http/access.js';
import { KeyDirectory } from './keys/key-directory.js';
import { KeyAdmission } from './limits/key-admission.js';
import { installRateLimits } from './http/rate-limits.js';
import { installPriority } from './http/priority.js';
import { installRequestContext } from './http/request-context.js';
import { installBodyDepth } from './http/body-depth.js';
import { drainBudget, installOversizeDrain } from './http/oversize-drain.js';
import { ResponsesSocket } from './responses/ws/responses.socket.js';
import { installConnectionCaps } from './http/connection-caps.js';
import { RefusalCounter } from './http/refusals.js';
import { HeldBytes, installUploadSlots } from './http/upload-slots.js';

export const start: ServiceStart = async (context) => {
  const { config } = context;
  let refusals: RefusalCounter | null = null;
  const running = await startHttpApp(GatewayModule.register(config, context.nc), {
    service: 'gateway',
    context,
    queue: 'gateway',
    listen: config.gateway.listen,
    bodyLimit: config.gateway.bodyLimitBytes,
    requestTimeoutMs: config.gateway.requestTimeoutMs,
    trustProxy: config.gateway.trustProxy,
    refusals: () => refusals?.snapshot() ?? {},
    configure: (app) => {
      const counter = app.get(RefusalCounter);
      refusals = counter;
      app.useGlobalFilters(new ApiExceptionFilter());
      const fastify = app.getHttpAdapter().getInstance();
      installRequestContext(fastify);
      installAccess(fastify, config, context.logger, app.get(KeyDirectory));
      installUploadSlots(
        fastify,
        {
          count: config.gateway.maxUploadsPerKey,
          bytes: config.gateway.maxUploadBytesPerKey,
          bodyLimit: config.gateway.bodyLimitBytes,
        },
        counter,
        app.get(HeldBytes),
      );
      installBodyDepth(app, counter);
      installOversizeDrain(fastify, drainBudget(config.gateway.bodyLimitBytes));
      installModelAccess(fastify);
      installPriority(fastify, config);
      installRateLimits(fastify, app.get(KeyAdmission));
      app.get(ResponsesSocket).install(fastify);
      let warned = 0;
      const server = app.getHttpServer();
      // A body not sent whole within gateway.request_timeout_ms: Node answers 408 (Fastify's handler writes it).
      server.on('clientError', (error: NodeJS.ErrnoException) => {
        if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT') counter.count('request_timeout');
      });
      installConnectionCaps(
        server,
        {
          total: config.gateway.maxConnections,
          perAddress: config.gateway.maxConnectionsPerAddress,
          exempt: config.gateway.trustProxy,
        },
        (address) => {
          counter.count('too_many_connections');
          // Once a minute at most: an address that keeps trying must not flood the log.
          if (Date.now() - warned < 60_000) return;
          warned = Date.now();
          context.logger.warn(
            `refused connections from ${address}: it holds ` +
              `${config.gateway.maxConnectionsPerAddress} already (gateway.max_connections_per_address)`,
            'gateway',
          );
        },
      );
    },
  });
  context.logger.log(`gateway listening on http://${config.gateway.listen}`, 'gateway');
  return running;
};
