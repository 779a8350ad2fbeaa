import { integer, maxLength, object, optionalString } from '../fields.js';
import { CortexError } from '../errors/error-codes.js';

/**
 * The HTTP header with which a client asks for a lower priority tier than its key's (1 to 9, higher
 * is served first). A higher tier than the key's is clamped to the key's: a header can only lower.
 */
export const PRIORITY_HEADER = 'x-cortex-priority';
/** The tier of requests made without a key (the loopback development mode, `auth: none`): below every key's. */
export const UNKEYED_TIER = 0;
export const MIN_KEY_TIER = 1;
export const MAX_KEY_TIER = 9;

/** gateway → worker, on a generate command: where the request stands when the model's slots are all busy. */
export interface RequestPriority {
  /** 0 (no key) to 9; a higher tier is admitted first. */
  tier: number;
  /** The account it is charged to: requests of one tier are admitted fairly across accounts. Absent without one. */
  account?: string;
  /** The stored key it was made with, for the worker's logs. */
  keyId?: string;
}

export function decodeRequestPriority(value: unknown, param: string): RequestPriority {
  const priority = object(value, param);
  const tier = integer(priority.tier, `${param}.tier`, UNKEYED_TIER);
  if (tier > MAX_KEY_TIER)
    throw new CortexError('invalid_request', `${param}.tier: must be at most ${MAX_KEY_TIER}, got ${tier}`, {
      param: `${param}.tier`,
    });
  maxLength(optionalString(priority.account, `${param}.account`), 64, `${param}.account`);
  maxLength(optionalString(priority.keyId, `${param}.keyId`), 128, `${param}.keyId`);
  return priority as unknown as RequestPriority;
}
