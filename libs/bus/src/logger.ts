import type { LoggerService, LogLevel } from '@nestjs/common';
import { pino, type Logger as Pino } from 'pino';
import { currentTraceIds } from './tracing.js';

const LEVELS: Record<string, string> = { trace: 'trace', debug: 'debug', info: 'info', warn: 'warn', error: 'error' };

/** Nest's own start-up chatter (a line per module and per route): debug, so `info` shows what cortex does. */
const FRAMEWORK_CONTEXTS = new Set([
  'NestFactory',
  'InstanceLoader',
  'RoutesResolver',
  'RouterExplorer',
  'NestMicroservice',
  'NestApplication',
]);

/**
 * Nest's logger interface over pino: one JSON object per line with `service`, `pid`, `context` and, for lines about a
 * request, `requestId` — so `grep <request id>` follows a request through every service — and, with tracing on,
 * `traceId` and `spanId` of the span the line was written in. Log an object (`logger.log({ msg, requestId, … })`) to
 * add fields.
 */
export class JsonLogger implements LoggerService {
  private readonly pino: Pino;

  constructor(service: string, level: string, destination?: NodeJS.WritableStream) {
    this.pino = pino(
      {
        level: LEVELS[level] ?? 'info',
        base: { service, pid: process.pid },
        timestamp: pino.stdTimeFunctions.isoTime,
        messageKey: 'msg',
      },
      destination as never,
    );
  }

  log(message: unknown, ...rest: unknown[]): void {
    this.write('info', message, rest);
  }

  error(message: unknown, ...rest: unknown[]): void {
    // Nest passes (message, stack, context) for errors.
    const [stack, ...others] = rest;
    this.write(
      'error',
      message,
      typeof stack === 'string' && others.length > 0 ? others : rest,
      typeof stack === 'string' && others.length > 0 ? stack : undefined,
    );
  }

  warn(message: unknown, ...rest: unknown[]): void {
    this.write('warn', message, rest);
  }

  debug(message: unknown, ...rest: unknown[]): void {
    this.write('debug', message, rest);
  }

  verbose(message: unknown, ...rest: unknown[]): void {
    this.write('trace', message, rest);
  }

  fatal(message: unknown, ...rest: unknown[]): void {
    this.write('fatal', message, rest);
  }

  setLogLevels(levels: LogLevel[]): void {
    if (levels.includes('verbose')) this.pino.level = 'trace';
    else if (levels.includes('debug')) this.pino.level = 'debug';
  }

  private write(
    given: 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal',
    message: unknown,
    rest: unknown[],
    stack?: string,
  ): void {
    const context = typeof rest.at(-1) === 'string' ? (rest.at(-1) as string) : undefined;
    const level = given === 'info' && context !== undefined && FRAMEWORK_CONTEXTS.has(context) ? 'debug' : given;
    const fields: Record<string, unknown> = {};
    if (context) fields.context = context;
    // With tracing on, a line written for a traced request names its trace (see startTracing).
    const ids = currentTraceIds();
    if (ids) {
      fields.traceId = ids.traceId;
      fields.spanId = ids.spanId;
    }
    if (stack) fields.stack = stack;
    if (message !== null && typeof message === 'object' && !(message instanceof Error)) {
      this.pino[level]({ ...fields, ...(message as Record<string, unknown>) });
    } else if (message instanceof Error) {
      this.pino[level]({ ...fields, err: message }, message.message);
    } else {
      this.pino[level](fields, String(message));
    }
  }
}
