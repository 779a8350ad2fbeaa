import { CortexError } from './errors/error-codes.js';

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

/** The requested model: a string, not empty. */
export function modelName(value: unknown): string {
  const model = string(value, 'model');
  if (model.length === 0) fail('model', 'must not be empty');
  return model;
}

/** A finite number, not below `min`. */
export function number(value: unknown, param: string, min = -Number.MAX_VALUE): number {
  if (typeof value !== 'number' || !Number.isFinite(value)) fail(param, `must be a number, got ${kind(value)}`);
  if (value < min) fail(param, `must be at least ${min}, got ${value}`);
  return value;
}

export function integer(value: unknown, param: string, min = Number.MIN_SAFE_INTEGER): number {
  const n = number(value, param, min);
  if (!Number.isInteger(n)) fail(param, `must be an integer, got ${n}`);
  return n;
}

export function boolean(value: unknown, param: string): boolean {
  if (typeof value !== 'boolean') fail(param, `must be a boolean, got ${kind(value)}`);
  return value;
}

export function optionalString(value: unknown, param: string): string | undefined {
  return value === undefined || value === null ? undefined : string(value, param);
}

export function array(value: unknown, param: string): unknown[] {
  if (!Array.isArray(value)) fail(param, `must be an array, got ${kind(value)}`);
  return value;
}

export function optionalArray(value: unknown, param: string): unknown[] | undefined {
  return value === undefined || value === null ? undefined : array(value, param);
}

export function optionalObject(value: unknown, param: string): Json | undefined {
  return value === undefined || value === null ? undefined : object(value, param);
}

export function optionalBoolean(value: unknown, param: string): boolean | undefined {
  return value === undefined || value === null ? undefined : boolean(value, param);
}

export function optionalNumber(value: unknown, param: string, min: number, max: number): number | undefined {
  if (value === undefined || value === null) return undefined;
  const n = number(value, param);
  if (n < min || n > max) fail(param, `must be between ${min} and ${max}, got ${n}`);
  return n;
}

export function optionalInteger(
  value: unknown,
  param: string,
  min: number,
  max = Number.MAX_SAFE_INTEGER,
): number | undefined {
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

/** A string that is absent, or at most `max` characters. */
export function maxLength(value: string | undefined, max: number, param: string): void {
  if (value !== undefined && value.length > max) fail(param, `must be at most ${max} characters, got ${value.length}`);
}

/** Stop sequences (at most 16, none empty; a lone string where the dialect allows one); none → undefined. */
export function stopSequences(value: unknown, param: string, options: { single?: boolean } = {}): string[] | undefined {
  if (value === undefined || value === null) return undefined;
  const stops =
    options.single && typeof value === 'string'
      ? [value]
      : array(value, param).map((s, i) => string(s, `${param}[${i}]`));
  if (stops.length > 16) fail(param, 'at most 16 stop sequences');
  if (stops.some((s) => s.length === 0)) fail(param, 'stop sequences must not be empty');
  return stops.length > 0 ? stops : undefined;
}

/** The fields that are set: an option the request left out stays out of the decoded object. */
export function defined<T extends object>(fields: T): T {
  for (const [key, value] of Object.entries(fields))
    if (value === undefined) delete (fields as Record<string, unknown>)[key];
  return fields;
}

function kind(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : `${typeof value} ${JSON.stringify(value)}`;
}
