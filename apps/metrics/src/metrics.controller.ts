import { Controller, Get, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { MetricsService } from './metrics.service.js';

@Controller()
export class MetricsController {
  constructor(private readonly service: MetricsService) {}

  @Get('metrics')
  async metrics(@Res() reply: FastifyReply): Promise<void> {
    const registry = this.service.metrics.registry;
    void reply.type(registry.contentType).send(await registry.metrics());
  }

  @Get(['healthz', 'readyz'])
  health(): { status: 'ok' } {
    return { status: 'ok' };
  }
}
