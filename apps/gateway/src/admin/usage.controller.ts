import { Controller, Get, Inject, Req, Res } from '@nestjs/common';
import { CONFIG, type CortexConfig } from '@cortex/config';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { respondJson } from '../http/error-response.js';
import { parseUsageQuery } from '../usage/usage-query.decider.js';
import { UsageRecorder } from '../usage/usage-recorder.js';

/**
 * `GET /admin/usage?account=&key=&model=&from=&to=&group_by=`: token use summed from the usage
 * records in the `CORTEX_USAGE` stream, for an admin key (http/access.ts).
 */
@Controller('admin')
export class UsageController {
  constructor(
    private readonly usage: UsageRecorder,
    @Inject(CONFIG) private readonly config: CortexConfig,
  ) {}

  @Get('usage')
  list(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    return respondJson(req, reply, async () => {
      const query = parseUsageQuery((req.query ?? {}) as Record<string, unknown>, Date.now());
      const data = await this.usage.query(query);
      return {
        object: 'list',
        from: new Date(query.from).toISOString(),
        to: new Date(query.to).toISOString(),
        group_by: query.groupBy,
        currency: this.config.billing.currency,
        data,
      };
    });
  }
}
