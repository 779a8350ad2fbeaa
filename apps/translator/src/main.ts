import { startBusApp, type ServiceStart } from '@cortex/bus';
import { TranslatorModule } from './translator.module.js';

export const start: ServiceStart = (context) =>
  startBusApp(TranslatorModule.register(context.config, context.nc), {
    service: 'translator',
    context,
    queue: 'translator',
  });
