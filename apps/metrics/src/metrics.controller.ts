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

  /** Ready while the bus is connected: without it no event reaches the counters. */
  @Get('readyz')
  ready(@Res() reply: FastifyReply): void {
    const ready = isBusConnected(this.bus.nc);
    void reply.status(ready ? 200 : 503).send({ status: ready ? 'ready' : 'not ready' });
  }
}
