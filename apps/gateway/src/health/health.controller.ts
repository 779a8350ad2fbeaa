import { Controller, Get, Inject, Res } from '@nestjs/common';
import type { FastifyReply } from 'fastify';
import { BusClient, checkFleetHealth, isBusConnected } from '@cortex/bus';
import { CONFIG, type CortexConfig } from '@cortex/config';
import type { FleetHealth } from '@cortex/contracts';
import { SharedAnswer } from './shared-answer.js';

/** How long one verdict answers every caller: well inside a heartbeat window, so a change shows within one. */
const VERDICT_MAX_AGE_MS = 1_000;

@Controller()
export class HealthController {
  private readonly verdict: SharedAnswer<FleetHealth>;

  constructor(
    private readonly bus: BusClient,
    @Inject(CONFIG) private readonly config: CortexConfig,
  ) {
    this.verdict = new SharedAnswer(() => checkFleetHealth(this.bus.nc), VERDICT_MAX_AGE_MS);
  }

  /**
   * The fleet in one word, for load balancers, uptime checks and people on call: `ok`, `impaired`
   * (something is down, every model can still be served) or `degraded` (a model cannot be served, or
   * the bus, JetStream or every router is gone), with the reasons and the models nothing can serve.
   * No key needed and no secret in it; the status code follows the verdict (`gateway.health_status`).
   * One verdict answers every caller for a second, so calling it in a loop costs the bus nothing more
   * (except while this gateway has no NATS connection, which it knows without asking anyone).
   */
  @Get('health')
  async health(@Res() reply: FastifyReply): Promise<void> {
    // A gateway that lost NATS knows it at once, and answering that costs nothing: no shared answer then.
    const health = isBusConnected(this.bus.nc) ? await this.verdict.get() : await checkFleetHealth(this.bus.nc);
    void reply.status(this.config.gateway.healthStatus[health.status]).header('cache-control', 'no-store').send(health);
  }

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
