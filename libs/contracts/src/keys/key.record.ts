import { createHash, randomBytes } from 'node:crypto';

/**
 * Keys and accounts as they are stored in the `cortex_keys` KV bucket (`key.<id>`, `account.<name>`)
 * and shown by the admin API: snake_case JSON, like the HTTP APIs. A key's secret is never stored,
 * only its SHA-256.
 */

export const BUDGET_WINDOWS = ['balance', 'day', 'month'] as const;
export type BudgetWindow = (typeof BUDGET_WINDOWS)[number];

/** Limits of a key or an account; an absent field is no limit. */
export interface Limits {
  requests_per_minute?: number;
  tokens_per_minute?: number;
  concurrent_requests?: number;
  /** Tokens (prompt + completion) a key or account may spend per window; `balance` never resets. */
  token_budget?: { tokens: number; window: BudgetWindow };
  /** Money (in `billing.currency`, at the catalogue's prices) a key or account may spend per window. */
  money_budget?: { amount: number; window: BudgetWindow };
}

export const LIMIT_FIELDS = [
  'requests_per_minute',
  'tokens_per_minute',
  'concurrent_requests',
  'token_budget',
  'money_budget',
] as const;

/**
 * The largest money budget: spend is counted in whole billionths of the currency, exact as long as
 * the sum stays a safe integer (2^53 billionths is about 9 million).
 */
export const MAX_MONEY_BUDGET = 9_000_000;

/** One secret that opens a key: the current one, or the previous one during a rotation's grace period. */
export interface KeySecret {
  sha256: string;
  /** The first characters of the secret, to recognise it in lists. */
  prefix: string;
  /** ISO time after which this secret no longer works; null for the current secret. */
  valid_until: string | null;
}

export interface KeyRecord {
  id: string;
  name: string;
  account: string;
  limits: Limits;
  /** Models the key may use (catalogue ids or aliases as requested); null: every model. */
  models: string[] | null;
  /**
   * MCP servers (their `mcp.servers` labels) the key's requests may have cortex call; null, or absent
   * (a key stored before this field), every registered server and, where the config allows them, URLs.
   */
  mcp_servers?: string[] | null;
  expires_at: string | null;
  /** Priority tier, 1 (lowest) to 9; requests without a key rank below every tier. */
  tier: number;
  created_at: string;
  updated_at: string;
  revoked_at: string | null;
  secrets: KeySecret[];
}

export interface AccountRecord {
  name: string;
  limits: Limits;
  updated_at: string;
}

/** What the admin API and `cortex keys` show of a key: everything but the secrets' hashes. */
export type KeyView = Omit<KeyRecord, 'secrets'> & {
  prefix: string;
  previous_secret_valid_until: string | null;
  state: KeyState;
};
export type KeyState = 'active' | 'revoked' | 'expired';

export const DEFAULT_TIER = 5;
export const SECRET_PREFIX = 'sk-cortex-';

export const keyEntry = (id: string): string => `key.${id}`;
export const accountEntry = (name: string): string => `account.${name}`;

export function hashSecret(secret: string): string {
  return createHash('sha256').update(secret, 'utf8').digest('hex');
}

/** A new key id and secret: 128 random bits for the id's part, 256 for the secret. */
export function newKeyIdentity(): { id: string; secret: string } {
  return {
    id: `key_${randomBytes(8).toString('hex')}`,
    secret: `${SECRET_PREFIX}${randomBytes(32).toString('base64url')}`,
  };
}

export function secretOf(secret: string, validUntil: string | null): KeySecret {
  return {
    sha256: hashSecret(secret),
    prefix: `${secret.slice(0, SECRET_PREFIX.length + 4)}…`,
    valid_until: validUntil,
  };
}

/** Whether a key can be used at `now`, and if not, why. */
export function keyState(key: KeyRecord, now: number): KeyState {
  if (key.revoked_at !== null) return 'revoked';
  if (key.expires_at !== null && Date.parse(key.expires_at) <= now) return 'expired';
  return 'active';
}

/** What presenting the secret with this hash means for `key` at `now`. */
export type SecretVerdict =
  { kind: 'ok' } | { kind: 'revoked'; at: string } | { kind: 'expired'; at: string; rotated: boolean };

export function judgeSecret(key: KeyRecord, sha256: string, now: number): SecretVerdict {
  if (key.revoked_at !== null) return { kind: 'revoked', at: key.revoked_at };
  if (key.expires_at !== null && Date.parse(key.expires_at) <= now)
    return { kind: 'expired', at: key.expires_at, rotated: false };
  const secret = key.secrets.find((s) => s.sha256 === sha256);
  if (secret?.valid_until != null && Date.parse(secret.valid_until) <= now)
    return { kind: 'expired', at: secret.valid_until, rotated: true };
  return { kind: 'ok' };
}

/** A new current secret; the previous one keeps working for `graceS` seconds (0: not at all). */
export function rotateKey(key: KeyRecord, secret: string, graceS: number, now: number): KeyRecord {
  const at = new Date(now).toISOString();
  const current = key.secrets.find((s) => s.valid_until === null);
  const previous =
    current && graceS > 0 ? [{ ...current, valid_until: new Date(now + graceS * 1_000).toISOString() }] : [];
  return { ...key, secrets: [secretOf(secret, null), ...previous], updated_at: at };
}

export function keyView(key: KeyRecord, now: number): KeyView {
  const { secrets, ...rest } = key;
  const current = secrets.find((s) => s.valid_until === null);
  const previous = secrets.find((s) => s.valid_until !== null && Date.parse(s.valid_until) > now);
  return {
    ...rest,
    mcp_servers: rest.mcp_servers ?? null,
    prefix: current?.prefix ?? '',
    previous_secret_valid_until: previous?.valid_until ?? null,
    state: keyState(key, now),
  };
}

/** Whether `key` may use the MCP server registered as `label`. */
export function mcpServerAllowed(key: Pick<KeyRecord, 'mcp_servers'>, label: string): boolean {
  return key.mcp_servers == null || key.mcp_servers.includes(label);
}

/** Whether `key` may use the model named in a request. */
export function modelAllowed(key: Pick<KeyRecord, 'models'>, model: string): boolean {
  return key.models === null || key.models.includes(model);
}
