import { randomUUID } from 'node:crypto';
import { Injectable, Logger, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import { CortexError, type AccountRecord, type KeyRecord } from '@cortex/contracts';
import { current, EMPTY_BUDGET, reservedOf, reserve, settle, type Budget, type BudgetState } from './budget.decider.js';
import { HeldIds } from './held-ids.js';
import { LimitsBucket } from './limits-bucket.js';

/** How long a reservation counts without renewal: the bound on a dead gateway's reservations. */
export const RESERVATION_TTL_MS = 15_000;
const RENEW_EVERY_MS = 5_000;
/** Pauses between the tries of a settlement that could not be written (NATS unreachable): about 30 s in all. */
const SETTLE_RETRIES_MS = [1_000, 2_000, 4_000, 8_000, 16_000];

interface Scope {
  entry: string;
  budget: Budget;
  label: string;
}

/** A refusal is `insufficient_quota` (spent: do not retry) or `rate_limit_exceeded` (only reserved: retry after `retryAfterMs`). */
export type ReserveResult =
  | { kind: 'admit'; settle: (used: number) => Promise<void> }
  | { kind: 'refuse'; error: CortexError; retryAfterMs: number | null };

/**
 * Token budgets of stored keys and accounts, in the KV bucket `cortex_limits` (`budget.key.<id>`,
 * `budget.account.<name>`), changed by compare-and-set like the rate limits. A request reserves a
 * bound on its tokens before dispatch; once its response closed and its runs reported (finished,
 * failed, cancelled or the client gone: see RequestMeter) the reservation is settled with what they
 * used. Reservations are renewed while held, so those of a dead gateway stop counting within
 * RESERVATION_TTL_MS.
 */
@Injectable()
export class BudgetLedger implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('budgets');
  /** The gateway is stopping: a settlement that fails is not tried again. */
  private stopped = false;
  /** The reservations this gateway holds, per budget entry, renewed every RENEW_EVERY_MS. */
  private readonly held = new HeldIds((entry, ids) =>
    this.bucket
      .change(entry, EMPTY_BUDGET, (state: BudgetState, now) => {
        const reservations = { ...state.reservations };
        for (const id of ids)
          if (reservations[id]) reservations[id] = { ...reservations[id], expiresAt: now + RESERVATION_TTL_MS };
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

  /** Reserves `tokens` in the key's and the account's budgets for the request `requestId`; `settle` turns the reservation into what it used. */
  async reserve(
    key: KeyRecord,
    account: AccountRecord | undefined,
    requestId: string,
    tokens: number,
  ): Promise<ReserveResult> {
    const scopes: Scope[] = [];
    if (key.limits.token_budget)
      scopes.push({
        entry: `budget.key.${key.id}`,
        budget: key.limits.token_budget,
        label: `the key ${key.id} ("${key.name}")`,
      });
    if (account?.limits.token_budget)
      scopes.push({
        entry: `budget.account.${account.name}`,
        budget: account.limits.token_budget,
        label: `the account ${account.name}`,
      });
    if (scopes.length === 0) return { kind: 'admit', settle: () => Promise.resolve() };
    // Unique per reservation: two requests under one x-request-id hold two.
    const id = `${requestId}.${randomUUID().slice(0, 8)}`;
    const admitted: Scope[] = [];
    for (const scope of scopes) {
      const decision = await this.bucket
        .change(scope.entry, EMPTY_BUDGET, (state: BudgetState, now) => {
          const d = reserve(state, scope.budget, id, { tokens, expiresAt: now + RESERVATION_TTL_MS }, now);
          return { next: d.kind === 'admit' ? d.next : null, result: d };
        })
        .catch(async (error: unknown) => {
          // The key's reservation may be made already: take it back, or it would be renewed for ever.
          await Promise.all(admitted.map((s) => this.finish(s, id, 0, false).catch(() => undefined)));
          throw error;
        });
      if (decision.kind === 'refuse') {
        await Promise.all(admitted.map((s) => this.finish(s, id, 0, false).catch(() => undefined)));
        const { tokens: limit, window } = scope.budget;
        const when =
          decision.resetsAt === null
            ? 'a balance, which never resets'
            : `it resets at ${new Date(decision.resetsAt).toISOString()}`;
        const period = window === 'balance' ? '' : window === 'day' ? ' today (UTC)' : ' this month (UTC)';
        if (decision.spent < limit) {
          // Not spent, only reserved by requests still running: worth retrying once they settle.
          const message = `${scope.label} has ${limit - decision.spent} tokens of its budget left, all reserved by running requests (${decision.reserved} reserved); retry when they end`;
          return {
            kind: 'refuse',
            error: new CortexError('rate_limit_exceeded', `rate limit reached (token budget): ${message}`, {
              retryAfter: 1,
            }),
            retryAfterMs: 1_000,
          };
        }
        const message = `${scope.label} has used its token budget: ${decision.spent} of ${limit} tokens spent${period} (${when})`;
        return { kind: 'refuse', error: new CortexError('insufficient_quota', message), retryAfterMs: null };
      }
      admitted.push(scope);
      this.held.add(scope.entry, id);
    }
    let settled = false;
    return {
      kind: 'admit',
      settle: async (used) => {
        if (settled) return;
        settled = true;
        await Promise.all(
          admitted.map((s) =>
            this.finish(s, id, used).catch((error: Error) =>
              this.logger.warn(
                `could not settle ${s.entry} (${error.message}); the request is not charged, and its reservation stops counting within ${RESERVATION_TTL_MS / 1000} s`,
              ),
            ),
          ),
        );
      },
    };
  }

  /** Spent and reserved tokens of the key's budget now, for `GET /admin/keys/{id}`. */
  async usage(key: KeyRecord, now = Date.now()): Promise<{ spent: number; reserved: number; period: string } | null> {
    if (!key.limits.token_budget) return null;
    const state = current(
      await this.bucket.read<BudgetState>(`budget.key.${key.id}`, EMPTY_BUDGET),
      key.limits.token_budget.window,
      now,
    );
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
        await this.bucket.change(scope.entry, EMPTY_BUDGET, (state: BudgetState, now) => ({
          next: settle(state, scope.budget.window, id, used, now),
          result: null,
        }));
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
