import {
  CortexError,
  DEFAULT_TIER,
  MAX_KEY_TIER,
  MIN_KEY_TIER,
  PRIORITY_HEADER,
  UNKEYED_TIER,
  type KeyRecord,
  type RequestPriority,
} from '@cortex/contracts';

/** Who made a request, as far as its priority goes. */
export type Caller =
  /** A stored key: its tier, account and id. */
  | { kind: 'stored'; key: Pick<KeyRecord, 'id' | 'account' | 'tier'> }
  /** A key from the config file (`auth.api_keys`, `auth.admin_keys`): the default tier, no account. */
  | { kind: 'config' }
  /** No key: the loopback development mode, or `auth: none`. */
  | { kind: 'none' };

/**
 * A request's tier and account in the workers' queues: its key's tier, lowered by the priority
 * header when that names a lower one. A header above the key's tier is clamped to it (a client may
 * only ever give way); one that is not a whole number from 1 to 9 is refused, naming the header.
 * Requests without a key rank below every tier, whatever the header says.
 */
export function priorityFor(caller: Caller, header: string | string[] | undefined): RequestPriority {
  const ceiling = caller.kind === 'stored' ? caller.key.tier : caller.kind === 'config' ? DEFAULT_TIER : UNKEYED_TIER;
  const tier = header === undefined ? ceiling : Math.min(askedTier(header), ceiling);
  return caller.kind === 'stored' ? { tier, account: caller.key.account, keyId: caller.key.id } : { tier };
}

function askedTier(header: string | string[]): number {
  const text = Array.isArray(header) ? header.join(', ') : header;
  const asked = /^\s*\d{1,2}\s*$/.test(text) ? Number(text) : NaN;
  if (!(asked >= MIN_KEY_TIER && asked <= MAX_KEY_TIER)) {
    throw new CortexError(
      'invalid_request',
      `the ${PRIORITY_HEADER} header must be a whole number from ${MIN_KEY_TIER} ` +
        `(lowest priority) to ${MAX_KEY_TIER}, got ${JSON.stringify(text)}`,
      { param: PRIORITY_HEADER },
    );
  }
  return asked;
}
