import { plainToInstance, type ClassConstructor } from 'class-transformer';
import { validateSync, type ValidationError } from 'class-validator';
import { CortexError } from './errors/error-codes.js';

/**
 * Turns a plain object into a validated instance of `cls`, or throws `invalid_request` naming the
 * first failing field by its path (e.g. `request.messages[1].role`).
 */
export function decodeMessage<T extends object>(cls: ClassConstructor<T>, plain: unknown, what = cls.name): T {
  if (plain === null || typeof plain !== 'object' || Array.isArray(plain)) {
    throw new CortexError('invalid_request', `${what}: expected an object`);
  }
  const instance = plainToInstance(cls, plain);
  const errors = validateSync(instance, { forbidUnknownValues: true });
  const first = errors[0];
  if (first) {
    const [path, message] = firstConstraint(first, '');
    throw new CortexError('invalid_request', `${what}: ${path} ${message}`, { param: path });
  }
  return instance;
}

function firstConstraint(error: ValidationError, prefix: string): [string, string] {
  const segment = /^\d+$/.test(error.property) ? `[${error.property}]` : prefix ? `.${error.property}` : error.property;
  const path = prefix + segment;
  const constraint = error.constraints ? Object.values(error.constraints)[0] : undefined;
  if (constraint) return [path, constraint.replace(new RegExp(`^${error.property} `), '')];
  const child = error.children?.[0];
  return child ? firstConstraint(child, path) : [path, 'is invalid'];
}
