import { ConsoleLogger, type LoggerService, type LogLevel } from '@nestjs/common';
import { JsonLogger } from '@cortex/bus';

const LEVELS: Record<string, LogLevel[]> = {
  trace: ['verbose', 'debug', 'log', 'warn', 'error', 'fatal'],
  debug: ['debug', 'log', 'warn', 'error', 'fatal'],
  info: ['log', 'warn', 'error', 'fatal'],
  warn: ['warn', 'error', 'fatal'],
  error: ['error', 'fatal'],
};

export function createLogger(service: string, level: string, format: 'json' | 'pretty'): LoggerService {
  if (format === 'json') return new JsonLogger(service, level);
  return new ConsoleLogger({ prefix: `cortex:${service}`, logLevels: LEVELS[level] ?? LEVELS.info, colors: process.stdout.isTTY });
}
