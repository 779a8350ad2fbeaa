import { Controller, Get, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { BusClient, isBusConnected } from '@cortex/bus';

@Controller()
export class HealthController {
  constructor(private readonly bus: BusClient) {}

  /**
   * The root answers 200 (and HEAD, which Fastify derives from GET): agents such as Claude Code probe
   * `HEAD /` of their base URL to see whether it is reachable before the first request.
   */
  @Get()
  root(): { status: 'ok'; service: 'cortex' } {
    return { status: 'ok', service: 'cortex' };
  }

  /** The process is alive. */
  @Get('healthz')
  healthz(): { status: 'ok' } {
    return { status: 'ok' };
  }

  /** The gateway can serve: the bus is connected. */
  @Get('readyz')
  readyz(@Res() reply: FastifyReply): void {
    const ready = isBusConnected(this.bus.nc);
    void reply
      .status(ready ? 200 : 503)
      .send({ status: ready ? 'ready' : 'not ready', bus: ready ? 'connected' : 'down' });
  }
}
