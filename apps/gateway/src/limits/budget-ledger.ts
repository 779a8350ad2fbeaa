import { randomUUID } from 'node:crypto';
import { Injectable, Logger, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import { CortexError, type AccountRecord, type KeyRecord, type Usage } from '@cortex/contracts';
import { current, EMPTY_BUDGET, reservedOf, reserve, settle, type Budget, type BudgetState } from './budget.decider.js';
import { HeldIds } from './held-ids.js';
import { LimitsBucket } from './limits-bucket.js';

/** How long a reservation counts without renewal: the bound on a dead gateway's reservations. */
export const RESERVATION_TTL_MS = 15_000;
const RENEW_EVERY_MS = 5_000;
/** How long a closed response waits for its usage (the request-finished record) before it settles with what it has. */
export const USAGE_WAIT_MS = 2_000;
/** Pauses between the tries of a settlement that could not be written (NATS unreachable): about 30 s in all. */
const SETTLE_RETRIES_MS = [1_000, 2_000, 4_000, 8_000, 16_000];
/** A background response's reply closes at once while its run goes on: it waits this long for its usage. */
export const BACKGROUND_USAGE_WAIT_MS = 30 * 60_000;

interface Scope {
  entry: string;
  budget: Budget;
  label: string;
}

/** What one request reserved, and the usage recorded for it so far. */
interface Pending {
  used: number;
  recorded: boolean;
  wake: (() => void) | null;
}

/** A refusal is `insufficient_quota` (spent: do not retry) or `rate_limit_exceeded` (only reserved: retry after `retryAfterMs`). */
export type ReserveResult = { kind: 'admit'; settle: (waitMs?: number) => Promise<number> } | { kind: 'refuse'; error: CortexError; retryAfterMs: number | null };

/**
 * Token budgets of stored keys and accounts, in the KV bucket `cortex_limits` (`budget.key.<id>`,
 * `budget.account.<name>`), changed by compare-and-set like the rate limits. A request reserves a
 * bound on its tokens before dispatch; when its response closes (finished, failed, cancelled or the
 * client gone) the reservation is settled with the usage the request-finished record reported, or 0
 * when none came. Reservations are renewed while held, so those of a dead gateway stop counting
 * within RESERVATION_TTL_MS.
 */
@Injectable()
export class BudgetLedger implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('budgets');
  private readonly pending = new Map<string, Pending>();
  /** The gateway is stopping: a settlement that fails is not tried again. */
  private stopped = false;
  /** The reservations this gateway holds, per budget entry, renewed every RENEW_EVERY_MS. */
  private readonly held = new HeldIds((entry, ids) =>
    this.bucket
      .change(entry, EMPTY_BUDGET, (state: BudgetState, now) => {
        const reservations = { ...state.reservations };
        for (const id of ids) if (reservations[id]) reservations[id] = { ...reservations[id], expiresAt: now + RESERVATION_TTL_MS };
        return { next: { ...state, reservations }, result: null };
      })
      .catch((error: Error) => this.logger.warn(`could not renew reservations of ${entry}: ${error.message}`)),
  );

  constructor(private readonly bucket: LimitsBucket) {}

  onModuleInit(): void {
    this.held.start(RENEW_EVERY_MS);
  }

  onModuleDestroy(): void {
    this.stopped = true;
    this.held.stop();
  }

  /**
   * Reserves `tokens` in the key's and the account's budgets for the request `requestId`. `settle`
   * resolves with the tokens the request used; with `track` it waits for them even without a budget
   * (tokens per minute settle with them too).
   */
  async reserve(key: KeyRecord, account: AccountRecord | undefined, requestId: string, tokens: number, track = false): Promise<ReserveResult> {
    const scopes: Scope[] = [];
    if (key.limits.token_budget) scopes.push({ entry: `budget.key.${key.id}`, budget: key.limits.token_budget, label: `the key ${key.id} ("${key.name}")` });
    if (account?.limits.token_budget) scopes.push({ entry: `budget.account.${account.name}`, budget: account.limits.token_budget, label: `the account ${account.name}` });
    if (scopes.length === 0 && !track) return { kind: 'admit', settle: () => Promise.resolve(0) };
    // Usage comes back by request id: two requests in flight under one id (a client's x-request-id)
    // would be charged as one, so the second is refused.
    if (this.pending.has(requestId)) {
      return { kind: 'refuse', error: new CortexError('invalid_request', `x-request-id "${requestId}" is already used by a request in flight of this gateway; send a unique id per request, or none`), retryAfterMs: null };
    }
    const id = `${requestId}.${randomUUID().slice(0, 8)}`;
    const admitted: Scope[] = [];
    for (const scope of scopes) {
      const decision = await this.bucket.change(scope.entry, EMPTY_BUDGET, (state: BudgetState, now) => {
        const d = reserve(state, scope.budget, id, { tokens, expiresAt: now + RESERVATION_TTL_MS }, now);
        return { next: d.kind === 'admit' ? d.next : null, result: d };
      }).catch(async (error: unknown) => {
        // The key's reservation may be made already: take it back, or it would be renewed for ever.
        await Promise.all(admitted.map((s) => this.finish(s, id, 0, false).catch(() => undefined)));
        throw error;
      });
      if (decision.kind === 'refuse') {
        await Promise.all(admitted.map((s) => this.finish(s, id, 0, false).catch(() => undefined)));
        const { tokens: limit, window } = scope.budget;
        const when = decision.resetsAt === null ? 'a balance, which never resets' : `it resets at ${new Date(decision.resetsAt).toISOString()}`;
        const period = window === 'balance' ? '' : window === 'day' ? ' today (UTC)' : ' this month (UTC)';
        if (decision.spent < limit) {
          // Not spent, only reserved by requests still running: worth retrying once they settle.
          const message = `${scope.label} has ${limit - decision.spent} tokens of its budget left, all reserved by running requests (${decision.reserved} reserved); retry when they end`;
          return { kind: 'refuse', error: new CortexError('rate_limit_exceeded', `rate limit reached (token budget): ${message}`, { retryAfter: 1 }), retryAfterMs: 1_000 };
        }
        const message = `${scope.label} has used its token budget: ${decision.spent} of ${limit} tokens spent${period} (${when})`;
        return { kind: 'refuse', error: new CortexError('insufficient_quota', message), retryAfterMs: null };
      }
      admitted.push(scope);
      this.held.add(scope.entry, id);
    }
    const pending: Pending = { used: 0, recorded: false, wake: null };
    this.pending.set(requestId, pending);
    let settled = false;
    return {
      kind: 'admit',
      settle: async (waitMs = USAGE_WAIT_MS) => {
        if (settled) return pending.used;
        settled = true;
        if (!pending.recorded) {
          // The request-finished record may come just after the response closed (a stream's last frame is written first).
          await new Promise<void>((done) => {
            pending.wake = done;
            setTimeout(done, waitMs).unref();
          });
        }
        // Another request may use the same id (a client's x-request-id): only this one's entry goes.
        if (this.pending.get(requestId) === pending) this.pending.delete(requestId);
        await Promise.all(
          admitted.map((s) =>
            this.finish(s, id, pending.used).catch((error: Error) => this.logger.warn(`could not settle ${s.entry} (${error.message}); the request is not charged, and its reservation stops counting within ${RESERVATION_TTL_MS / 1000} s`)),
          ),
        );
        return pending.used;
      },
    };
  }

  /** A run of `requestId` finished with this usage (one request may run several: legacy completions with many prompts). */
  record(requestId: string, usage: Usage | null): void {
    const pending = this.pending.get(requestId);
    if (!pending) return;
    pending.used += usage ? usage.promptTokens + usage.completionTokens : 0;
    pending.recorded = true;
    pending.wake?.();
  }

  /** Spent and reserved tokens of the key's budget now, for `GET /admin/keys/{id}`. */
  async usage(key: KeyRecord, now = Date.now()): Promise<{ spent: number; reserved: number; period: string } | null> {
    if (!key.limits.token_budget) return null;
    const state = current(await this.bucket.read<BudgetState>(`budget.key.${key.id}`, EMPTY_BUDGET), key.limits.token_budget.window, now);
    return { spent: state.spent, reserved: reservedOf(state), period: state.period };
  }

  /**
   * Turns the reservation into spend. While NATS is unreachable (a restart) the write fails: it is
   * tried again for about as long as a usage record's publish (SETTLE_RETRIES_MS), the reservation
   * still held and renewed meanwhile, so a request that ends during the outage is charged once NATS
   * is back, as its usage record is stored then. Only past that is the request left uncharged.
   */
  private async finish(scope: Scope, id: string, used: number, retry = true): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        await this.bucket.change(scope.entry, EMPTY_BUDGET, (state: BudgetState, now) => ({ next: settle(state, scope.budget.window, id, used, now), result: null }));
        break;
      } catch (error) {
        const pause = SETTLE_RETRIES_MS[attempt];
        // An admission taken back (nothing spent) is not worth a wait: its reservation expires.
        if (pause === undefined || !retry || this.stopped) {
          this.held.delete(scope.entry, id);
          throw error;
        }
        await new Promise((done) => setTimeout(done, pause).unref());
      }
    }
    this.held.delete(scope.entry, id);
  }
}
