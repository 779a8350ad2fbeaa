import { Controller, Get, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { BusClient, isBusConnected } from '@cortex/bus';
import { MetricsService } from './metrics.service.js';

@Controller()
export class MetricsController {
  constructor(
    private readonly service: MetricsService,
    private readonly bus: BusClient,
  ) {}

  @Get('metrics')
  async metrics(@Res() reply: FastifyReply): Promise<void> {
    const registry = this.service.metrics.registry;
    void reply.type(registry.contentType).send(await registry.metrics());
  }

  @Get('healthz')
  health(): { status: 'ok' } {
    return { status: 'ok' };
  }

  /** Ready once the counters have replayed the stored events, and while the bus is connected. */
  @Get('readyz')
  ready(@Res() reply: FastifyReply): void {
    const bus = isBusConnected(this.bus.nc);
    const ready = bus && this.service.caughtUp;
    void reply.status(ready ? 200 : 503).send({
      status: ready ? 'ready' : 'not ready',
      bus: bus ? 'connected' : 'down',
      replayed: this.service.caughtUp,
    });
  }
}
