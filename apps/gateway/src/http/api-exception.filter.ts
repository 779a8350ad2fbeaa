import { Catch, HttpException, type ArgumentsHost, type ExceptionFilter } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { throwError, type Observable } from 'rxjs';
import { sendError, toCortexError } from './error-response.js';
import { contextOf } from './request-context.js';

/** Whatever escapes a controller (or Nest's own 404) leaves in the caller's API error shape. */
@Catch()
export class ApiExceptionFilter implements ExceptionFilter {
  catch(exception: unknown, host: ArgumentsHost): void | Observable<never> {
    // Bus handlers inherit this filter; their errors travel back to the caller as they are.
    if (host.getType() === 'rpc') return throwError(() => exception);
    const http = host.switchToHttp();
    const request = http.getRequest<FastifyRequest>();
    const reply = http.getResponse<FastifyReply>();
    if (reply.sent) return;
    const error =
      exception instanceof HttpException
        ? toCortexError(Object.assign(new Error(exception.message), { statusCode: exception.getStatus() }))
        : toCortexError(exception);
    sendError(reply, request.url, error, contextOf(request).id);
  }
}
