import { Inject, Injectable, Logger, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import type { KvWatchEntry } from '@nats-io/kv';
import { BusClient, KeyStore, KvCatchUp, watchKv } from '@cortex/bus';
import { CONFIG, ConfigError, type CortexConfig } from '@cortex/config';
import {
  CortexError,
  declaredKeys,
  hashSecret,
  judgeSecret,
  parseKeyFile,
  SECRET_PREFIX,
  type AccountRecord,
  type KeyRecord,
} from '@cortex/contracts';

/** Who a request is, once its key is known: a stored key (its account's limits apply too, see limits/). */
export interface KeyPrincipal {
  key: KeyRecord;
}

export type Identification =
  { kind: 'unknown' } | { kind: 'key'; principal: KeyPrincipal } | { kind: 'refused'; error: CortexError };

/** The longest a request with an unknown stored-key secret waits for this gateway's view to catch up with the bucket. */
export const KEY_CATCH_UP_MS = 1_000;

/**
 * Every gateway's view of the `cortex_keys` bucket, kept current by a KV watch: a key created,
 * revoked or rotated anywhere is seen here as soon as NATS delivers the change (milliseconds). Lookups
 * are by the SHA-256 of the presented secret, so a secret is never compared or kept in memory.
 */
@Injectable()
export class KeyDirectory implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('keys');
  private readonly byHash = new Map<string, string>();
  private readonly keys = new Map<string, KeyRecord>();
  private readonly accounts = new Map<string, AccountRecord>();
  /** Keys and accounts the config file declares (`auth.keys`, `auth.accounts`): below the stored ones of the same secret or name. */
  private readonly declaredByHash = new Map<string, KeyRecord>();
  private readonly declaredAccounts = new Map<string, AccountRecord>();
  private stopWatch: (() => void) | null = null;
  private keyStore: KeyStore | null = null;
  private catchUp: KvCatchUp | null = null;

  constructor(
    private readonly bus: BusClient,
    @Inject(CONFIG) private readonly config: CortexConfig,
  ) {}

  async onModuleInit(): Promise<void> {
    this.declare();
    this.keyStore = await KeyStore.open(this.bus.nc);
    // Read everything before serving, so a key that exists is never refused while the watch starts.
    for (const key of await this.keyStore.list()) this.putKey(key);
    for (const account of await this.keyStore.listAccounts()) this.accounts.set(account.name, account);
    this.catchUp = new KvCatchUp(this.keyStore.bucket);
    this.stopWatch = watchKv(
      this.keyStore.bucket,
      (entry) => this.apply(entry),
      (error) => this.logger.warn(`keys watch: ${error.message}; watching again`),
      this.catchUp,
    );
  }

  onModuleDestroy(): void {
    this.stopWatch?.();
  }

  /** Reads the keys and accounts the config file declares, checked as a key file's are; a bad one stops the gateway, naming it. */
  private declare(): void {
    const { keys, accounts } = this.config.auth;
    if (keys.length === 0 && Object.keys(accounts).length === 0) return;
    let declared: ReturnType<typeof declaredKeys>;
    try {
      declared = declaredKeys(parseKeyFile({ keys, accounts }, process.env), Date.now());
    } catch (error) {
      const param = error instanceof CortexError ? error.extra.param : undefined;
      const message = (error as Error).message.replace(/^[^:]*: /, '');
      throw new ConfigError(`config: auth.${param ?? 'keys'}: ${message}`);
    }
    for (const key of declared.keys) for (const secret of key.secrets) this.declaredByHash.set(secret.sha256, key);
    for (const account of declared.accounts) this.declaredAccounts.set(account.name, account);
    this.logger.log(
      `${declared.keys.length} key(s) and ${declared.accounts.length} account(s) declared in the config file (auth.keys, auth.accounts)`,
    );
  }

  get store(): KeyStore {
    if (!this.keyStore)
      throw new CortexError('service_unavailable', 'the keys store is not open yet', { retryAfter: 1 });
    return this.keyStore;
  }

  /** A presented secret: a stored key (usable or refused, saying why), or not one of ours. */
  identify(secret: string, now = Date.now()): Identification {
    return this.identifyHash(hashSecret(secret), now);
  }

  /**
   * `identify`, for a secret shaped like a stored key's that is unknown here: asked again once this
   * gateway's view holds every change the bucket had (a key made a moment ago through another gateway
   * is not refused), or after `KEY_CATCH_UP_MS`. Null when the secret needs no second look.
   */
  identifyAfterCatchUp(secret: string): Promise<Identification> | null {
    if (!secret.startsWith(SECRET_PREFIX) || !this.catchUp) return null;
    return this.catchUp.caughtUp(KEY_CATCH_UP_MS).then(() => this.identify(secret));
  }

  /** The same by the secret's SHA-256, for a connection that checks its key again on every turn without keeping the secret. */
  identifyHash(sha256: string, now = Date.now()): Identification {
    const id = this.byHash.get(sha256);
    const key = (id === undefined ? undefined : this.keys.get(id)) ?? this.declaredByHash.get(sha256);
    if (!key) return { kind: 'unknown' };
    const verdict = judgeSecret(key, sha256, now);
    if (verdict.kind === 'revoked')
      return {
        kind: 'refused',
        error: new CortexError('key_revoked', `the API key ${key.id} ("${key.name}") was revoked at ${verdict.at}`),
      };
    if (verdict.kind === 'expired') {
      const what = verdict.rotated
        ? `was rotated; its previous secret stopped working at ${verdict.at}`
        : `expired at ${verdict.at}`;
      return {
        kind: 'refused',
        error: new CortexError('key_expired', `the API key ${key.id} ("${key.name}") ${what}`),
      };
    }
    return { kind: 'key', principal: { key } };
  }

  account(name: string): AccountRecord | undefined {
    return this.accounts.get(name) ?? this.declaredAccounts.get(name);
  }

  private apply(entry: KvWatchEntry): void {
    const [kind, ...rest] = entry.key.split('.');
    const name = rest.join('.');
    if (kind === 'key') {
      this.dropKey(name);
      if (entry.operation === 'PUT') this.putKey(entry.json<KeyRecord>());
    } else if (kind === 'account') {
      if (entry.operation === 'PUT') this.accounts.set(name, entry.json<AccountRecord>());
      else this.accounts.delete(name);
    }
  }

  private putKey(key: KeyRecord): void {
    this.dropKey(key.id);
    this.keys.set(key.id, key);
    for (const secret of key.secrets) this.byHash.set(secret.sha256, key.id);
  }

  private dropKey(id: string): void {
    const old = this.keys.get(id);
    if (!old) return;
    for (const secret of old.secrets) this.byHash.delete(secret.sha256);
    this.keys.delete(id);
  }
}
