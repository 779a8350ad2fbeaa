import { Controller, Delete, Get, Param, Patch, Post, Req, Res } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { BusClient } from '@cortex/bus';
import { PULL_REPLY_TIMEOUT_MS, Subjects } from '@cortex/contracts';
import { respondJson } from '../http/error-response.js';

type Body = { model?: unknown; worker?: unknown };

/**
 * Fleet operations over HTTP, for an admin key (see http/access.ts): the same router requests the
 * `cortex` CLI sends over the bus. Bodies are `{"model": "...", "worker": "..."}`; the router validates.
 */
@Controller('admin')
export class AdminController {
  constructor(private readonly bus: BusClient) {}

  @Get('fleet')
  fleet(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    return this.relay(req, reply, Subjects.routerFleet, {});
  }

  @Post('load')
  load(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    return this.relay(req, reply, Subjects.routerLoad, req.body, 120_000);
  }

  /** Downloads a model's file onto `worker` or onto every worker (`"all": true`) ahead of any load; answers when all have it. */
  @Post('pull')
  pull(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    return this.relay(req, reply, Subjects.routerPull, req.body, PULL_REPLY_TIMEOUT_MS);
  }

  @Post('unload')
  unload(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    return this.relay(req, reply, Subjects.routerUnload, req.body, 120_000);
  }

  @Post('pin')
  pin(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    return this.relay(req, reply, Subjects.routerPin, { ...(req.body as Body), pinned: true });
  }

  @Post('unpin')
  unpin(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    return this.relay(req, reply, Subjects.routerPin, { ...(req.body as Body), pinned: false });
  }

  /** Adds a model to the live catalogue: the body is the model as written under `models:` in the config file. */
  @Post('models')
  addModel(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    return this.relay(req, reply, Subjects.routerCatalogueAdd, { model: req.body ?? null });
  }

  /** Changes fields of a model (null returns a field to its default). */
  @Patch('models/:id')
  setModel(@Req() req: FastifyRequest, @Res() reply: FastifyReply, @Param('id') id: string): Promise<void> {
    return this.relay(req, reply, Subjects.routerCatalogueSet, { id, fields: req.body ?? null });
  }

  /** Removes a model: refused from the next request on, drained and unloaded where it is loaded. */
  @Delete('models/:id')
  removeModel(@Req() req: FastifyRequest, @Res() reply: FastifyReply, @Param('id') id: string): Promise<void> {
    return this.relay(req, reply, Subjects.routerCatalogueRemove, { id }, 120_000);
  }

  private relay(
    req: FastifyRequest,
    reply: FastifyReply,
    subject: string,
    payload: unknown,
    timeoutMs?: number,
  ): Promise<void> {
    return respondJson(req, reply, (requestId) => this.bus.request(subject, payload ?? {}, { requestId, timeoutMs }));
  }
}
