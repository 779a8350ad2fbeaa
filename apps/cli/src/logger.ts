import type { LoggerService } from '@nestjs/common';
import { build as prettyStream } from 'pino-pretty';
import { JsonLogger } from '@cortex/bus';

/**
 * `json`: one pino object per line, for log pipelines. `pretty`: the same records through pino-pretty,
 * one readable line each (`12:00:01 INFO gateway http: listening …`). Unset: pretty on a terminal,
 * JSON otherwise (a container, a pipe, a file).
 */
export function createLogger(service: string, level: string, format?: 'json' | 'pretty'): LoggerService {
  if (!isPretty(format)) return new JsonLogger(service, level);
  const stream = prettyStream({
    sync: true,
    colorize: Boolean(process.stdout.isTTY) && !process.env.NO_COLOR,
    translateTime: 'SYS:HH:MM:ss',
    ignore: 'pid,hostname,service,context',
    messageFormat: '{service}{if context} {context}{end}: {msg}',
    singleLine: true,
  });
  return new JsonLogger(service, level, stream);
}

/** `log_format`, or when unset whether stdout is a terminal. */
export function isPretty(format: 'json' | 'pretty' | undefined): boolean {
  return (format ?? (process.stdout.isTTY ? 'pretty' : 'json')) === 'pretty';
}
