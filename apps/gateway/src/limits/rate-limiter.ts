import { randomUUID } from 'node:crypto';
import { Injectable, Logger, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import { CortexError, type AccountRecord, type KeyRecord } from '@cortex/contracts';
import {
  decide,
  EMPTY_SCOPE,
  liveLeases,
  release,
  renew,
  requestWindow,
  undo,
  type LimitName,
  type RequestWindow,
  type ScopeLimits,
  type ScopeState,
} from './rate-limit.decider.js';
import { HeldIds } from './held-ids.js';
import { LimitsBucket } from './limits-bucket.js';

/** How long a concurrency lease counts without renewal: the bound on a dead gateway's slots. */
export const LEASE_TTL_MS = 15_000;
const RENEW_EVERY_MS = 5_000;

interface Scope {
  entry: string;
  limits: ScopeLimits;
  /** Says whose limit it is in a refusal: `the key key_… ("ci")`, `the account team-a`. */
  label: string;
}

export type AdmissionResult =
  | { kind: 'admit'; requests: RequestWindow | null; release: () => Promise<void> }
  | { kind: 'refuse'; error: CortexError; retryAfterMs: number; requests: RequestWindow | null };

const LIMIT_WORDS: Record<LimitName, string> = {
  requests_per_minute: 'requests per minute',
  concurrent_requests: 'concurrent requests',
};

/**
 * Requests per minute and concurrent requests of stored keys and their accounts, counted in the KV
 * bucket `cortex_limits` so that every gateway replica counts the same requests. Each decision reads
 * a scope's state, decides (rate-limit.decider.ts) and writes the result only if the entry's revision
 * is still the one read: two gateways admitting at once cannot both take the last slot, the loser
 * reads again. A key and its account are two scopes; a refusal by the second undoes the first.
 */
@Injectable()
export class RateLimiter implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('limits');
  /** The leases this gateway holds, per scope entry, renewed every RENEW_EVERY_MS. */
  private readonly held = new HeldIds((entry, ids) =>
    this.change(entry, (state, now) => ({ next: renew(state, ids, now + LEASE_TTL_MS, now), result: null })).catch(
      (error: Error) => this.logger.warn(`could not renew leases of ${entry}: ${error.message}`),
    ),
  );

  constructor(private readonly bucket: LimitsBucket) {}

  onModuleInit(): void {
    this.held.start(RENEW_EVERY_MS);
  }

  onModuleDestroy(): void {
    this.held.stop();
  }

  /** Whether a request of `key` (in `account`) may start now; on admission, `release` must be called once it ends. */
  async admit(key: KeyRecord, account: AccountRecord | undefined): Promise<AdmissionResult> {
    const scopes: Scope[] = [
      { entry: `key.${key.id}`, limits: key.limits, label: `the key ${key.id} ("${key.name}")` },
    ];
    if (account)
      scopes.push({ entry: `account.${account.name}`, limits: account.limits, label: `the account ${account.name}` });
    const limited = scopes.filter(
      (s) => s.limits.requests_per_minute !== undefined || s.limits.concurrent_requests !== undefined,
    );
    if (limited.length === 0) return { kind: 'admit', requests: null, release: () => Promise.resolve() };
    const leaseId = randomUUID();
    const admitted: Scope[] = [];
    let requests: RequestWindow | null = null;
    for (const scope of limited) {
      const decision = await this.change(scope.entry, (state, now) => {
        const d = decide(state, scope.limits, now, { id: leaseId, expiresAt: now + LEASE_TTL_MS });
        return { next: d.kind === 'admit' ? d.next : null, result: d };
      }).catch(async (error: unknown) => {
        // The key's scope may be admitted already: undo it, or its lease would be renewed for ever.
        await this.undoAll(admitted, leaseId);
        throw error;
      });
      if (decision.kind === 'refuse') {
        await this.undoAll(admitted, leaseId);
        const wait = Math.max(1, decision.retryAfterMs);
        const what =
          decision.limit === 'concurrent_requests'
            ? `${scope.label} has ${decision.running} requests running, ` +
              `its limit of ${scope.limits.concurrent_requests} concurrent requests; retry when one ends`
            : `${scope.label} has used its ${scope.limits.requests_per_minute} requests per minute; ` +
              `retry in ${(wait / 1000).toFixed(wait < 10_000 ? 1 : 0)} s`;
        const error = new CortexError(
          'rate_limit_exceeded',
          `rate limit reached (${LIMIT_WORDS[decision.limit]}): ${what}`,
          { retryAfter: Math.ceil(wait / 1000) },
        );
        return { kind: 'refuse', error, retryAfterMs: wait, requests: decision.requests ?? requests };
      }
      admitted.push(scope);
      if (scope.limits.concurrent_requests !== undefined) this.held.add(scope.entry, leaseId);
      // The headers report the window with the fewest requests left.
      if (decision.requests && (!requests || decision.requests.remaining < requests.remaining))
        requests = decision.requests;
    }
    let released = false;
    const done = async (): Promise<void> => {
      if (released) return;
      released = true;
      await Promise.all(
        admitted
          .filter((s) => s.limits.concurrent_requests !== undefined)
          .map(async (s) => {
            this.held.delete(s.entry, leaseId);
            await this.change(s.entry, (state, now) => ({ next: release(state, leaseId, now), result: null })).catch(
              (error: Error) =>
                this.logger.warn(
                  `could not release a lease of ${s.entry} (${error.message}); it stops counting within ${LEASE_TTL_MS / 1000} s`,
                ),
            );
          }),
      );
    };
    return { kind: 'admit', requests, release: done };
  }

  /** What a key's scope has in use now: requests running (live leases) and its request window. */
  async usage(
    key: KeyRecord,
    now = Date.now(),
  ): Promise<{
    concurrent_requests_running: number;
    requests_remaining: number | null;
    requests_reset_ms: number | null;
  }> {
    const state = await this.bucket.read<ScopeState>(`key.${key.id}`, EMPTY_SCOPE);
    const rpm = key.limits.requests_per_minute;
    const window = rpm === undefined ? null : requestWindow(rpm, state.tat, now);
    return {
      concurrent_requests_running: Object.keys(liveLeases(state, now)).length,
      requests_remaining: window?.remaining ?? null,
      requests_reset_ms: window?.resetMs ?? null,
    };
  }

  /** Takes back what an admission that did not complete had counted. */
  private async undoAll(admitted: readonly Scope[], leaseId: string): Promise<void> {
    for (const s of admitted) this.held.delete(s.entry, leaseId);
    await Promise.all(
      admitted.map((s) =>
        this.change(s.entry, (state, now) => ({ next: undo(state, s.limits, leaseId, now), result: null })).catch(
          () => undefined,
        ),
      ),
    );
  }

  private change<R>(
    entry: string,
    edit: (state: ScopeState, now: number) => { next: ScopeState | null; result: R },
  ): Promise<R> {
    return this.bucket.change(entry, EMPTY_SCOPE, edit);
  }
}
