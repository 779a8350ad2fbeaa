import { startHttpApp, type ServiceStart } from '@cortex/bus';
import { MetricsModule } from './metrics.module.js';

export const start: ServiceStart = async (context) => {
  const listen = context.config.metrics.listen;
  const running = await startHttpApp(MetricsModule.register(context.config, context.nc), {
    service: 'metrics',
    context,
    listen,
  });
  context.logger.log(`metrics on http://${listen}/metrics`, 'metrics');
  return running;
};
