import { Catch, type ArgumentsHost, type RpcExceptionFilter } from '@nestjs/common';
import { throwError, type Observable } from 'rxjs';

/**
 * Nest's default RPC filter replaces unknown errors with a generic object; cortex errors carry a code
 * the caller needs (404, 429, 503…), so let them through to `BusServer`, which encodes the reply.
 */
@Catch()
export class BusExceptionFilter implements RpcExceptionFilter<unknown> {
  catch(exception: unknown, _host: ArgumentsHost): Observable<never> {
    return throwError(() => exception);
  }
}
