import { readFile } from 'node:fs/promises';
import { Controller, Get, Param, Post, Req, Res } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { BusClient } from '@cortex/bus';
import {
  assertToken,
  CortexError,
  decodeCancelLoadReply,
  object,
  Subjects,
  workerSubject,
  string,
} from '@cortex/contracts';
import { respondJson, sendError } from '../http/error-response.js';
import { ConsoleHub } from './console.hub.js';
import { consoleCookie } from './console-access.js';
import { contextOf } from '../http/request-context.js';

/** The page's files, shipped in the repository beside `src/` (apps/gateway/console). */
const ASSETS = new URL('../../console/', import.meta.url);
const TYPES: Record<string, string> = {
  'console.js': 'text/javascript; charset=utf-8',
  'console.css': 'text/css; charset=utf-8',
};

const escapeHtml = (text: string): string => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/**
 * The web console: the page at `/console` (an admin route, see http/access.ts), its live feed at
 * `/admin/console/feed` (server-sent events) and the one operation the other admin routes lack:
 * cancelling a request in flight.
 */
@Controller()
export class ConsoleController {
  private readonly files = new Map<string, string>();

  constructor(
    private readonly hub: ConsoleHub,
    private readonly bus: BusClient,
  ) {}

  @Get('console')
  async page(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    const key = (req.query as Record<string, unknown>).key;
    if (typeof key === 'string' && key) {
      // The access check let the key through: keep it in a cookie and take it out of the address bar.
      const secure = req.protocol === 'https';
      void reply.header('set-cookie', consoleCookie(key, secure)).redirect('/console', 303);
      return;
    }
    const html = (await this.file('index.html'))
      .replaceAll('{{title}}', escapeHtml(this.hub.title))
      .replaceAll('{{heading}}', escapeHtml(this.hub.heading))
      .replaceAll('{{heading-hidden}}', this.hub.heading ? '' : ' hidden');
    void reply.header('cache-control', 'no-store').type('text/html; charset=utf-8').send(html);
  }

  @Get('console/:file')
  async asset(@Param('file') name: string, @Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    const type = TYPES[name];
    if (!type)
      return sendError(reply, req.url, new CortexError('not_found', `no console file ${name}`), contextOf(req).id);
    void reply
      .header('cache-control', 'no-cache')
      .type(type)
      .send(await this.file(name));
  }

  @Get('admin/console/feed')
  feed(@Req() req: FastifyRequest, @Res() reply: FastifyReply): void {
    reply.hijack();
    const last = req.headers['last-event-id'];
    void this.hub.attach(reply.raw, typeof last === 'string' ? last : undefined);
  }

  /** Stops a request in flight on its worker; the gateway streaming it ends it as cancelled. */
  @Post('admin/requests/cancel')
  cancel(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    return respondJson(req, reply, (requestId) => {
      const body = object(req.body ?? null, 'body');
      const runId = subjectToken(string(body.runId, 'runId'), 'runId');
      const workerId = subjectToken(string(body.workerId, 'workerId'), 'workerId');
      this.bus.publish(
        workerSubject(Subjects.workerCancel, workerId),
        { runId, reason: 'cancelled from the console' },
        requestId,
      );
      this.hub.refresh();
      return Promise.resolve({ runId, workerId, sent: true });
    });
  }

  /**
   * Stops a load in progress on one worker. The worker aborts it (a download or the read into memory),
   * its router hears the load fail, releases the model's load lease, and every request waiting on
   * the load gets `model_load_failed` saying it was cancelled.
   */
  @Post('admin/load/cancel')
  cancelLoad(@Req() req: FastifyRequest, @Res() reply: FastifyReply): Promise<void> {
    return respondJson(req, reply, async (requestId) => {
      const body = object(req.body ?? null, 'body');
      const model = string(body.model, 'model');
      const workerId = subjectToken(string(body.worker, 'worker'), 'worker');
      const answer = await this.bus.request(
        workerSubject(Subjects.workerCancelLoad, workerId),
        { model, reason: 'cancelled from the console' },
        { requestId, decode: decodeCancelLoadReply, timeoutMs: 5_000 },
      );
      if (!answer.cancelled)
        throw new CortexError('not_found', `${model} is not loading on ${workerId}`, { param: 'model' });
      this.hub.refresh();
      return answer;
    });
  }

  private async file(name: string): Promise<string> {
    let text = this.files.get(name);
    if (text === undefined) {
      text = await readFile(new URL(name, ASSETS), 'utf8');
      this.files.set(name, text);
    }
    return text;
  }
}

/** A worker or run id from a request body, usable in a subject; otherwise a 400 naming the field. */
function subjectToken(value: string, name: string): string {
  try {
    assertToken(value, name);
  } catch (error) {
    throw new CortexError('invalid_request', (error as Error).message, { param: name });
  }
  return value;
}
