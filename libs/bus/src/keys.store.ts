import type { KV } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  accountEntry,
  applyLimitsPatch,
  Buckets,
  CortexError,
  keyEntry,
  newKeyIdentity,
  rotateKey,
  secretOf,
  type AccountRecord,
  type KeyCreateInput,
  type KeyRecord,
  type KeyUpdateInput,
  type LimitsPatch,
} from '@cortex/contracts';
import { openKv } from './replicas.js';

const KEY_ID = /^key_[0-9a-f]{16}$/;
/** Compare-and-set attempts before a write that keeps losing to others gives up (503). */
const CAS_ATTEMPTS = 10;

/**
 * Keys and accounts in the `cortex_keys` bucket (with `nats.replicas` copies). Every change is a
 * compare-and-set on the entry's revision, so two admins (or two gateways) changing one key at once
 * never lose a change: the later one reads again and reapplies its edit.
 */
export class KeyStore {
  private constructor(private readonly kv: KV) {}

  static async open(nc: NatsConnection): Promise<KeyStore> {
    return new KeyStore(await openKv(nc, Buckets.keys, { history: 5, description: 'cortex: API keys (hashed) and accounts' }));
  }

  get bucket(): KV {
    return this.kv;
  }

  /** A new key; its secret is returned here once and never stored. */
  async create(input: KeyCreateInput, now = Date.now()): Promise<{ key: KeyRecord; secret: string }> {
    const { id, secret } = newKeyIdentity();
    const at = new Date(now).toISOString();
    const key: KeyRecord = { id, ...input, created_at: at, updated_at: at, revoked_at: null, secrets: [secretOf(secret, null)] };
    await this.kv.create(keyEntry(id), JSON.stringify(key));
    return { key, secret };
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
    return (await this.read(id)).key;
  }

  update(id: string, input: KeyUpdateInput, now = Date.now()): Promise<KeyRecord> {
    return this.change(id, (key) => {
      if (key.revoked_at !== null) throw new CortexError('invalid_request', `key ${id} is revoked and cannot change; create a new key`, { param: 'id' });
      const { limits, ...rest } = input;
      return { ...key, ...rest, ...(limits && { limits: applyLimitsPatch(key.limits, limits) }), updated_at: new Date(now).toISOString() };
    });
  }

  /** A new secret for the key; the old one keeps working for `graceS` seconds. */
  async rotate(id: string, graceS: number, now = Date.now()): Promise<{ key: KeyRecord; secret: string }> {
    const { secret } = newKeyIdentity();
    const key = await this.change(id, (current) => {
      if (current.revoked_at !== null) throw new CortexError('invalid_request', `key ${id} is revoked and cannot be rotated; create a new key`, { param: 'id' });
      return rotateKey(current, secret, graceS, now);
    });
    return { key, secret };
  }

  /** Revoked at once, on every gateway (they watch the bucket); revoking twice keeps the first time. */
  revoke(id: string, now = Date.now()): Promise<KeyRecord> {
    return this.change(id, (key) => (key.revoked_at !== null ? key : { ...key, revoked_at: new Date(now).toISOString(), updated_at: new Date(now).toISOString() }));
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
    for (let attempt = 0; attempt < CAS_ATTEMPTS; attempt++) {
      const entry = await this.kv.get(accountEntry(name));
      const current: AccountRecord = entry?.operation === 'PUT' ? entry.json<AccountRecord>() : { name, limits: {}, updated_at: '' };
      const next: AccountRecord = { name, limits: applyLimitsPatch(current.limits, patch), updated_at: new Date(now).toISOString() };
      try {
        if (entry) await this.kv.update(accountEntry(name), JSON.stringify(next), entry.revision);
        else await this.kv.create(accountEntry(name), JSON.stringify(next));
        return next;
      } catch {
        // Someone else wrote it first: read again.
      }
    }
    throw new CortexError('service_unavailable', `account ${name} changed too often at once; try again`, { retryAfter: 1 });
  }

  private async read(id: string): Promise<{ key: KeyRecord; revision: number }> {
    const entry = KEY_ID.test(id) ? await this.kv.get(keyEntry(id)) : null;
    if (!entry || entry.operation !== 'PUT') throw new CortexError('not_found', `no key ${id} (\`cortex keys list\` or GET /admin/keys lists them)`, { param: 'id' });
    return { key: entry.json<KeyRecord>(), revision: entry.revision };
  }

  private async change(id: string, edit: (key: KeyRecord) => KeyRecord): Promise<KeyRecord> {
    for (let attempt = 0; attempt < CAS_ATTEMPTS; attempt++) {
      const { key, revision } = await this.read(id);
      const next = edit(key);
      if (next === key) return key;
      try {
        await this.kv.update(keyEntry(id), JSON.stringify(next), revision);
        return next;
      } catch {
        // Another writer got there first: read again and reapply the edit.
      }
    }
    throw new CortexError('service_unavailable', `key ${id} changed too often at once; try again`, { retryAfter: 1 });
  }
}
