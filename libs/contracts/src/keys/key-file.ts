import { createHash } from 'node:crypto';
import { CortexError } from '../errors/error-codes.js';
import {
  applyLimitsPatch,
  bad,
  objectOf,
  parseAccountPut,
  parseKeyCreate,
  type KeyCreateInput,
  type LimitsPatch,
} from './key.input.js';
import {
  hashSecret,
  LIMIT_FIELDS,
  SECRET_PREFIX,
  secretOf,
  type AccountRecord,
  type KeyRecord,
  type KeySecret,
  type Limits,
} from './key.record.js';

/**
 * `cortex keys apply <file>`: keys and accounts declared in a file (YAML or JSON) that can live in
 * git, made so in the `cortex_keys` bucket. A key is matched by name; a secret is declared by its
 * SHA-256 or by the environment variable that holds it, never written in the file.
 *
 * ```yaml
 * accounts:
 *   team-a:
 *     limits: { concurrent_requests: 16, requests_per_minute: 600 }
 * keys:
 *   - name: ci
 *     account: team-a
 *     tier: 7
 *     models: [cortex-chat]
 *     mcp_servers: [docs]
 *     limits: { requests_per_minute: 60 }
 *     secret_env: CORTEX_CI_KEY        # or secret_sha256: <64 hex digits>
 * ```
 */
export interface KeyFile {
  accounts: { name: string; limits: Limits }[];
  keys: DeclaredKey[];
}

/** A key as a file declares it: the fields `POST /admin/keys` takes and, optionally, its one secret. */
export interface DeclaredKey {
  input: KeyCreateInput;
  secret: KeySecret | null;
}

/** The least length of a secret given through `secret_env` (after cortex's `sk-cortex-` prefix, if it has it). */
export const MIN_DECLARED_SECRET = 20;

const SHA256 = /^[0-9a-f]{64}$/;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** The same error with its field named from the file's top (`keys[2].limits.…`). */
function within(at: string, error: unknown): unknown {
  if (!(error instanceof CortexError) || error.extra.param === undefined) return error;
  return bad(`${at}.${error.extra.param}`, error.message.replace(/^[^:]*: /, ''));
}

/**
 * A key file's content (parsed from YAML or JSON); `env` supplies `secret_env` variables. An empty
 * document is refused: an empty file or pipe is far likelier a mistake than a wish for no keys.
 */
export function parseKeyFile(value: unknown, env: Readonly<Record<string, string | undefined>>): KeyFile {
  if (value === null || value === undefined)
    throw bad('file', 'is empty: declare keys: and/or accounts: (an empty keys: [] declares no keys)');
  const body = objectOf(value, 'file');
  for (const field of Object.keys(body))
    if (field !== 'accounts' && field !== 'keys') throw bad(field, 'is not a known field (known: accounts, keys)');
  const accounts = Object.entries(body.accounts === undefined ? {} : objectOf(body.accounts, 'accounts')).map(
    ([name, account]) => {
      try {
        const { limits } = parseAccountPut(name, account ?? {});
        return { name, limits: applyLimitsPatch({}, limits) };
      } catch (error) {
        throw within(`accounts.${name}`, error);
      }
    },
  );
  if (body.keys !== undefined && !Array.isArray(body.keys)) throw bad('keys', 'must be a list of keys');
  const keys = ((body.keys ?? []) as unknown[]).map((entry, i) => {
    const at = `keys[${i}]`;
    const { secret_sha256: sha256, secret_env: envName, ...fields } = objectOf(entry, at);
    try {
      // Any expiry, a past one too: a declared key that has expired stays expired (and the file valid).
      return { input: parseKeyCreate(fields, Number.NEGATIVE_INFINITY), secret: declaredSecret(sha256, envName, env) };
    } catch (error) {
      throw within(at, error);
    }
  });
  const names = new Map<string, number>();
  const secrets = new Map<string, number>();
  keys.forEach((key, i) => {
    const first = names.get(key.input.name);
    if (first !== undefined)
      throw bad(
        `keys[${i}].name`,
        `"${key.input.name}" is declared twice (also keys[${first}]): a key is matched by its name`,
      );
    names.set(key.input.name, i);
    if (!key.secret) return;
    const same = secrets.get(key.secret.sha256);
    if (same !== undefined)
      throw bad(`keys[${i}].secret`, `is the secret of keys[${same}] too: each key needs a secret of its own`);
    secrets.set(key.secret.sha256, i);
  });
  return { accounts, keys };
}

function declaredSecret(
  sha256: unknown,
  envName: unknown,
  env: Readonly<Record<string, string | undefined>>,
): KeySecret | null {
  if (sha256 !== undefined && envName !== undefined)
    throw bad('secret_sha256', 'and secret_env both declare the secret: keep one');
  if (sha256 !== undefined) {
    const hex = typeof sha256 === 'string' ? sha256.toLowerCase() : '';
    // The value is not echoed: a secret pasted here by mistake must not reach a CI log.
    if (!SHA256.test(hex))
      throw bad(
        'secret_sha256',
        `must be the secret's SHA-256 as 64 hexadecimal digits (printf %s "$SECRET" | sha256sum); ` +
          `this one is not (${typeof sha256 === 'string' ? `${sha256.length} characters` : typeof sha256})`,
      );
    return { sha256: hex, prefix: `sha256:${hex.slice(0, 8)}…`, valid_until: null };
  }
  if (envName === undefined) return null;
  if (typeof envName !== 'string' || !ENV_NAME.test(envName))
    throw bad('secret_env', `must name an environment variable (got ${JSON.stringify(envName)})`);
  const secret = env[envName];
  if (!secret)
    throw bad('secret_env', `${envName} is not set in this environment: export it, or declare secret_sha256 instead`);
  // A client sends the secret without the newline a file or `echo` leaves: hashed with it, the key would refuse every request.
  if (secret !== secret.trim()) {
    throw bad(
      'secret_env',
      `${envName} has white space (a newline?) around the secret, which no client sends: ` +
        `set it without (export ${envName}="$(printf %s "$${envName}" | tr -d '[:space:]')")`,
    );
  }
  // Inside an Authorization or x-api-key header a secret is visible ASCII: anything else is never sent as it is stored.
  const unsendable = /[^\x21-\x7e]/.exec(secret);
  if (unsendable) {
    const at = unsendable.index;
    const code = unsendable[0].charCodeAt(0);
    const what = /\s/.test(unsendable[0])
      ? 'white space'
      : code < 0x20 || code === 0x7f
        ? 'a control character'
        : 'a character outside visible ASCII';
    throw bad(
      'secret_env',
      `${envName} holds ${what} at position ${at + 1}, which no client can send in an Authorization or x-api-key header: ` +
        'use letters, digits and punctuation only',
    );
  }
  // cortex's own prefix is no secret: what follows it must be long enough alone.
  const own = secret.startsWith(SECRET_PREFIX) ? secret.length - SECRET_PREFIX.length : secret.length;
  if (own < MIN_DECLARED_SECRET)
    throw bad(
      'secret_env',
      `${envName} holds ${own} secret characters${own === secret.length ? '' : ` after ${SECRET_PREFIX}`}; ` +
        `a secret needs at least ${MIN_DECLARED_SECRET}`,
    );
  // A generated secret shows its first characters in lists; another shows as little as the hash's.
  return secret.startsWith(SECRET_PREFIX)
    ? secretOf(secret, null)
    : { sha256: hashSecret(secret), prefix: `${secret.slice(0, 3)}…`, valid_until: null };
}

/** What applying a file does to one key: which of its fields change. */
export type KeyChange =
  | { action: 'create'; name: string; declared: DeclaredKey }
  | { action: 'update'; id: string; name: string; fields: string[]; declared: DeclaredKey }
  | { action: 'unchanged'; id: string; name: string };

export interface AccountChange {
  action: 'set' | 'unchanged';
  name: string;
  limits: Limits;
}

export interface KeyApplyPlan {
  accounts: AccountChange[];
  keys: KeyChange[];
  /** Stored keys (not revoked) whose names the file does not declare: left as they are. */
  notInFile: { id: string; name: string }[];
}

/**
 * The changes that make the store match `file`. Each declared key is matched to the one stored key
 * (not revoked) of its name; two such keys of one name are an error, since either could be meant.
 * Fields the file leaves out take their defaults, as for a new key; a key that declares no secret
 * keeps the secrets it has.
 */
export function planKeyApply(
  file: KeyFile,
  stored: readonly KeyRecord[],
  accounts: readonly AccountRecord[],
): KeyApplyPlan {
  const live = stored.filter((key) => key.revoked_at === null);
  const keys = file.keys.map((declared, i): KeyChange => {
    const { name } = declared.input;
    const named = live.filter((key) => key.name === name);
    if (named.length > 1) {
      throw bad(
        `keys[${i}].name`,
        `${named.length} stored keys are named "${name}" (${named.map((k) => k.id).join(', ')}): ` +
          'revoke all but one (cortex keys revoke <id>) or rename one (cortex keys update <id> --name …), then apply again',
      );
    }
    const current = named[0];
    // Revoked keys too: a gateway finds a key by its secret's hash, and one hash must mean one key.
    const holder =
      declared.secret &&
      stored.find((key) => key !== current && key.secrets.some((s) => s.sha256 === declared.secret?.sha256));
    if (holder)
      throw bad(
        `keys[${i}].secret`,
        `is already a secret of key ${holder.id} ("${holder.name}"): each key needs a secret of its own`,
      );
    if (!current) return { action: 'create', name, declared };
    const fields = changedFields(current, declared);
    return fields.length === 0
      ? { action: 'unchanged', id: current.id, name }
      : { action: 'update', id: current.id, name, fields, declared };
  });
  const declaredNames = new Set(file.keys.map((key) => key.input.name));
  const notInFile = live.filter((key) => !declaredNames.has(key.name)).map((key) => ({ id: key.id, name: key.name }));
  const byName = new Map(accounts.map((account) => [account.name, account]));
  const accountChanges = file.accounts.map(({ name, limits }): AccountChange => {
    const current = byName.get(name);
    return { action: current && same(current.limits, limits) ? 'unchanged' : 'set', name, limits };
  });
  return { accounts: accountChanges, keys, notInFile };
}

/** The fields of `key` the declaration changes, by their admin API names (`secret` for its secret). */
export function changedFields(key: KeyRecord, declared: DeclaredKey): string[] {
  const { input, secret } = declared;
  const fields: string[] = [];
  if (key.account !== input.account) fields.push('account');
  if (!same(key.limits, input.limits)) fields.push('limits');
  if (!same(key.models, input.models)) fields.push('models');
  if (!same(key.mcp_servers ?? null, input.mcp_servers ?? null)) fields.push('mcp_servers');
  if (key.expires_at !== input.expires_at) fields.push('expires_at');
  if (key.tier !== input.tier) fields.push('tier');
  const current = key.secrets.find((s) => s.valid_until === null) ?? null;
  if (secret && (key.secrets.length !== 1 || current?.sha256 !== secret.sha256)) fields.push('secret');
  return fields;
}

/** A key record as declared: the file's fields replace the stored ones, and a declared secret replaces every secret at once. */
export function declaredRecord(key: KeyRecord, declared: DeclaredKey, now: number): KeyRecord {
  return {
    ...key,
    ...declared.input,
    ...(declared.secret && { secrets: [declared.secret] }),
    updated_at: new Date(now).toISOString(),
  };
}

/** The patch that makes an account's limits exactly `limits` (every other limit removed). */
export function accountPatch(limits: Limits): LimitsPatch {
  return Object.fromEntries(LIMIT_FIELDS.map((field) => [field, limits[field] ?? null])) as LimitsPatch;
}

/** Equal as JSON, whatever the order of object fields. */
function same(a: unknown, b: unknown): boolean {
  return canonical(a) === canonical(b);
}

function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    return `{${Object.keys(value as object)
      .sort()
      .map((key) => `${JSON.stringify(key)}:${canonical((value as Record<string, unknown>)[key])}`)
      .join(',')}}`;
  }
  return JSON.stringify(value);
}

/** The id of a key declared in the config file: made from its name, so every gateway gives it the same one. */
export function configKeyId(name: string): string {
  return `config_${createHash('sha256').update(name).digest('hex').slice(0, 16)}`;
}

/**
 * The keys and accounts a config file declares (`auth.keys`, `auth.accounts`, the key file's shape),
 * as the records a gateway holds in memory beside the stored ones. Each needs its secret (by
 * `secret_env` or `secret_sha256`): a declared key no one can present is a mistake.
 */
export function declaredKeys(file: KeyFile, now: number): { keys: KeyRecord[]; accounts: AccountRecord[] } {
  const at = new Date(now).toISOString();
  const keys = file.keys.map(({ input, secret }, i) => {
    if (!secret)
      throw bad(`keys[${i}].secret_env`, 'is needed (or secret_sha256): a declared key must say what its secret is');
    return {
      id: configKeyId(input.name),
      ...input,
      created_at: at,
      updated_at: at,
      revoked_at: null,
      secrets: [secret],
    };
  });
  const accounts = file.accounts.map(({ name, limits }) => ({ name, limits, updated_at: at }));
  return { keys, accounts };
}
