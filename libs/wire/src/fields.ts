import { CortexError } from '@cortex/contracts';

/** Small readers for untrusted JSON bodies: each throws `invalid_request` naming the field's path. */
export type Json = Record<string, unknown>;

export function fail(param: string, message: string): never {
  throw new CortexError('invalid_request', `${param}: ${message}`, { param });
}

export function isObject(value: unknown): value is Json {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

export function object(value: unknown, param: string): Json {
  if (!isObject(value)) fail(param, `must be an object, got ${kind(value)}`);
  return value;
}

export function string(value: unknown, param: string): string {
  if (typeof value !== 'string') fail(param, `must be a string, got ${kind(value)}`);
  return value;
}

export function optionalString(value: unknown, param: string): string | undefined {
  return value === undefined || value === null ? undefined : string(value, param);
}

export function array(value: unknown, param: string): unknown[] {
  if (!Array.isArray(value)) fail(param, `must be an array, got ${kind(value)}`);
  return value;
}

export function optionalBoolean(value: unknown, param: string): boolean | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'boolean') fail(param, `must be a boolean, got ${kind(value)}`);
  return value;
}

export function optionalNumber(value: unknown, param: string, min: number, max: number): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isFinite(value)) fail(param, `must be a number, got ${kind(value)}`);
  if (value < min || value > max) fail(param, `must be between ${min} and ${max}, got ${value}`);
  return value;
}

export function optionalInteger(value: unknown, param: string, min: number, max = Number.MAX_SAFE_INTEGER): number | undefined {
  const number = optionalNumber(value, param, min, max);
  if (number !== undefined && !Number.isInteger(number)) fail(param, `must be an integer, got ${number}`);
  return number;
}

export function oneOf<T extends string>(value: unknown, param: string, allowed: readonly T[]): T {
  if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value)) {
    fail(param, `must be one of ${allowed.map((a) => `'${a}'`).join(', ')}, got ${JSON.stringify(value)}`);
  }
  return value as T;
}

function kind(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : `${typeof value} ${JSON.stringify(value)}`;
}
