import { ConsoleLogger, type LogLevel } from '@nestjs/common';

const LEVELS: Record<string, LogLevel[]> = {
  trace: ['verbose', 'debug', 'log', 'warn', 'error', 'fatal'],
  debug: ['debug', 'log', 'warn', 'error', 'fatal'],
  info: ['log', 'warn', 'error', 'fatal'],
  warn: ['warn', 'error', 'fatal'],
  error: ['error', 'fatal'],
};

export function createLogger(service: string, level: string): ConsoleLogger {
  return new ConsoleLogger({ prefix: `cortex:${service}`, logLevels: LEVELS[level] ?? LEVELS.info, colors: process.stdout.isTTY });
}
