import { startBusApp, type ServiceStart } from '@cortex/bus';
import { RouterModule } from './router.module.js';

export const start: ServiceStart = (context) =>
  startBusApp(RouterModule.register(context.config, context.nc), { service: 'router', context, queue: 'router' });
