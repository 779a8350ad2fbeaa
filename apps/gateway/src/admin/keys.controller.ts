import { Controller, Get, Param, Patch, Post, Put, Req, Res } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { keyView, parseAccountPut, parseKeyCreate, parseKeyUpdate, parseRotate } from '@cortex/contracts';
import { respondJson } from '../http/error-response.js';
import { KeyDirectory } from '../keys/key-directory.js';
import { RateLimiter } from '../limits/rate-limiter.js';
import { BudgetLedger } from '../limits/budget-ledger.js';

/**
 * Stored keys and accounts, for an admin key (http/access.ts): `cortex keys` does the same over the
 * bus. A key's secret is in the answer to create and rotate only; everything else shows its prefix.
 */
@Controller('admin')
export class KeysController {
  constructor(
    private readonly directory: KeyDirectory,
    private readonly limiter: RateLimiter,
    private readonly budgets: BudgetLedger,
  ) {}

  @Post('keys')
  create(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    return respondJson(req, reply, async () => {
      const { key, secret } = await this.directory.store.create(parseKeyCreate(req.body ?? {}, Date.now()));
      return { ...keyView(key, Date.now()), secret };
    });
  }

  @Get('keys')
  list(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    return respondJson(req, reply, async () => ({
      object: 'list',
      data: (await this.directory.store.list()).map((key) => keyView(key, Date.now())),
    }));
  }

  @Get('keys/:id')
  show(@Req() req: FastifyRequest, @Res() reply: FastifyReply, @Param('id') id: string): Promise<void> {
    return respondJson(req, reply, async () => {
      const key = await this.directory.store.get(id);
      return {
        ...keyView(key, Date.now()),
        account_limits: this.directory.account(key.account)?.limits ?? {},
        usage: { ...(await this.limiter.usage(key)), ...(await this.budgets.usage(key)) },
      };
    });
  }

  @Patch('keys/:id')
  update(@Req() req: FastifyRequest, @Res() reply: FastifyReply, @Param('id') id: string): Promise<void> {
    return respondJson(req, reply, async () =>
      keyView(await this.directory.store.update(id, parseKeyUpdate(req.body ?? {}, Date.now())), Date.now()),
    );
  }

  @Post('keys/:id/rotate')
  rotate(@Req() req: FastifyRequest, @Res() reply: FastifyReply, @Param('id') id: string): Promise<void> {
    return respondJson(req, reply, async () => {
      const { grace_s } = parseRotate(req.body);
      const { key, secret } = await this.directory.store.rotate(id, grace_s);
      return { ...keyView(key, Date.now()), secret };
    });
  }

  @Post('keys/:id/revoke')
  revoke(@Req() req: FastifyRequest, @Res() reply: FastifyReply, @Param('id') id: string): Promise<void> {
    return respondJson(req, reply, async () => keyView(await this.directory.store.revoke(id), Date.now()));
  }

  @Get('accounts')
  accounts(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    return respondJson(req, reply, async () => ({ object: 'list', data: await this.directory.store.listAccounts() }));
  }

  @Put('accounts/:name')
  putAccount(@Req() req: FastifyRequest, @Res() reply: FastifyReply, @Param('name') name: string): Promise<void> {
    return respondJson(req, reply, async () => {
      const { limits } = parseAccountPut(name, req.body ?? {});
      return this.directory.store.putAccount(name, limits);
    });
  }
}
