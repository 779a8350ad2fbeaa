import type { KV, KvEntry } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  accountEntry,
  applyLimitsPatch,
  Buckets,
  changedFields,
  CortexError,
  declaredRecord,
  keyEntry,
  newKeyIdentity,
  rotateKey,
  secretOf,
  type AccountRecord,
  type DeclaredKey,
  type KeyCreateInput,
  type KeyRecord,
  type KeySecret,
  type KeyUpdateInput,
  type LimitsPatch,
} from '@cortex/contracts';
import { casUpdate } from './kv-cas.js';
import { openKv } from './replicas.js';

const KEY_ID = /^key_[0-9a-f]{16}$/;

/**
 * Keys and accounts in the `cortex_keys` bucket (with `nats.replicas` copies). Every change is a
 * compare-and-set on the entry's revision, so two admins (or two gateways) changing one key at once
 * never lose a change: the later one reads again and reapplies its edit.
 */
export class KeyStore {
  private constructor(private readonly kv: KV) {}

  static async open(nc: NatsConnection): Promise<KeyStore> {
    return new KeyStore(
      await openKv(nc, Buckets.keys, { history: 5, description: 'cortex: API keys (hashed) and accounts' }),
    );
  }

  get bucket(): KV {
    return this.kv;
  }

  /** A new key; its secret is returned here once and never stored. */
  async create(input: KeyCreateInput, now = Date.now()): Promise<{ key: KeyRecord; secret: string }> {
    const { id, secret } = newKeyIdentity();
    return { key: await this.insert(id, input, secretOf(secret, null), now), secret };
  }

  /** A new key opened by a secret declared elsewhere (`cortex keys apply`): only its hash is given. */
  createDeclared(input: KeyCreateInput, secret: KeySecret, now = Date.now()): Promise<KeyRecord> {
    return this.insert(newKeyIdentity().id, input, secret, now);
  }

  /** A key made as declared: the declared fields replace its own, a declared secret replaces all of its secrets. */
  declare(id: string, declared: DeclaredKey, now = Date.now()): Promise<KeyRecord> {
    return this.change(id, (key) => {
      if (key.revoked_at !== null)
        throw new CortexError('invalid_request', `key ${id} is revoked and cannot change; create a new key`, {
          param: 'id',
        });
      return changedFields(key, declared).length === 0 ? key : declaredRecord(key, declared, now);
    });
  }

  private async insert(id: string, input: KeyCreateInput, secret: KeySecret, now: number): Promise<KeyRecord> {
    const at = new Date(now).toISOString();
    const key: KeyRecord = { id, ...input, created_at: at, updated_at: at, revoked_at: null, secrets: [secret] };
    await this.kv.create(keyEntry(id), JSON.stringify(key));
    return key;
  }

  async list(): Promise<KeyRecord[]> {
    const keys: KeyRecord[] = [];
    for await (const name of await this.kv.keys('key.>')) {
      const entry = await this.kv.get(name);
      if (entry?.operation === 'PUT') keys.push(entry.json<KeyRecord>());
    }
    return keys.sort((a, b) => a.created_at.localeCompare(b.created_at) || a.id.localeCompare(b.id));
  }

  async get(id: string): Promise<KeyRecord> {
    return this.read(id);
  }

  update(id: string, input: KeyUpdateInput, now = Date.now()): Promise<KeyRecord> {
    return this.change(id, (key) => {
      if (key.revoked_at !== null)
        throw new CortexError('invalid_request', `key ${id} is revoked and cannot change; create a new key`, {
          param: 'id',
        });
      const { limits, ...rest } = input;
      return {
        ...key,
        ...rest,
        ...(limits && { limits: applyLimitsPatch(key.limits, limits) }),
        updated_at: new Date(now).toISOString(),
      };
    });
  }

  /** A new secret for the key; the old one keeps working for `graceS` seconds. */
  async rotate(id: string, graceS: number, now = Date.now()): Promise<{ key: KeyRecord; secret: string }> {
    const { secret } = newKeyIdentity();
    const key = await this.change(id, (current) => {
      if (current.revoked_at !== null)
        throw new CortexError('invalid_request', `key ${id} is revoked and cannot be rotated; create a new key`, {
          param: 'id',
        });
      return rotateKey(current, secret, graceS, now);
    });
    return { key, secret };
  }

  /** Revoked at once, on every gateway (they watch the bucket); revoking twice keeps the first time. */
  revoke(id: string, now = Date.now()): Promise<KeyRecord> {
    return this.change(id, (key) =>
      key.revoked_at !== null
        ? key
        : { ...key, revoked_at: new Date(now).toISOString(), updated_at: new Date(now).toISOString() },
    );
  }

  async listAccounts(): Promise<AccountRecord[]> {
    const accounts: AccountRecord[] = [];
    for await (const name of await this.kv.keys('account.>')) {
      const entry = await this.kv.get(name);
      if (entry?.operation === 'PUT') accounts.push(entry.json<AccountRecord>());
    }
    return accounts.sort((a, b) => a.name.localeCompare(b.name));
  }

  /** Sets an account's limits (a limit set to null is removed); creates the account if it is new. */
  async putAccount(name: string, patch: LimitsPatch, now = Date.now()): Promise<AccountRecord> {
    const { result } = await casUpdate(
      this.kv,
      accountEntry(name),
      (entry) => {
        const current: AccountRecord =
          entry?.operation === 'PUT' ? entry.json<AccountRecord>() : { name, limits: {}, updated_at: '' };
        const next: AccountRecord = {
          name,
          limits: applyLimitsPatch(current.limits, patch),
          updated_at: new Date(now).toISOString(),
        };
        return { value: JSON.stringify(next), result: next };
      },
      `account ${name} changed too often at once; try again`,
    );
    return result;
  }

  private async read(id: string): Promise<KeyRecord> {
    const entry = KEY_ID.test(id) ? await this.kv.get(keyEntry(id)) : null;
    return this.recordOf(id, entry);
  }

  private recordOf(id: string, entry: KvEntry | null): KeyRecord {
    if (!entry || entry.operation !== 'PUT')
      throw new CortexError('not_found', `no key ${id} (\`cortex keys list\` or GET /admin/keys lists them)`, {
        param: 'id',
      });
    return entry.json<KeyRecord>();
  }

  private async change(id: string, edit: (key: KeyRecord) => KeyRecord): Promise<KeyRecord> {
    if (!KEY_ID.test(id)) this.recordOf(id, null);
    const { result } = await casUpdate(
      this.kv,
      keyEntry(id),
      (entry) => {
        const key = this.recordOf(id, entry);
        const next = edit(key);
        return next === key ? { result: key } : { value: JSON.stringify(next), result: next };
      },
      `key ${id} changed too often at once; try again`,
    );
    return result;
  }
}
