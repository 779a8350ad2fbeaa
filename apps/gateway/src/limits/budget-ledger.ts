import { randomUUID } from 'node:crypto';
import { Inject, Injectable, Logger, type OnApplicationShutdown, type OnModuleInit } from '@nestjs/common';
import { CONFIG, type CortexConfig } from '@cortex/config';
import { billionthsOf, CortexError, type AccountRecord, type KeyRecord, type Limits } from '@cortex/contracts';
import {
  current,
  EMPTY_BUDGET,
  refusalOf,
  reservedOf,
  reserve,
  settle,
  TOKENS,
  type Budget,
  type BudgetState,
  type BudgetUnit,
} from './budget.decider.js';
import { formatMoney } from './money.decider.js';
import { HeldIds } from './held-ids.js';
import { LimitsBucket } from './limits-bucket.js';
import { FinalWrites } from '../usage/final-writes.js';

/** How long a reservation counts without renewal: the bound on a dead gateway's reservations. */
export const RESERVATION_TTL_MS = 15_000;
const RENEW_EVERY_MS = 5_000;

interface Scope {
  entry: string;
  budget: Budget;
  label: string;
  unit: BudgetUnit;
  /** Which of a request's amounts it counts. */
  counts: 'tokens' | 'money';
}

/** What a request may spend at most, reserved before it is dispatched. */
export interface BudgetAsk {
  /** Its bound in tokens (limits/reservation.ts). */
  tokens: number;
  /** The same bound at its model's price, in billionths of the currency (money.decider.ts); null: the model has no price. */
  money: number | null;
  /** The model it names, for a refusal. */
  model: string;
}

/** What a request spent once its runs reported: tokens, and the cost of its usage records in billionths. */
export interface BudgetUse {
  tokens: number;
  money: number;
}

/**
 * A refusal is `insufficient_quota` (spent: do not retry), `rate_limit_exceeded` (only reserved: retry after
 * `retryAfterMs`) or `permission_denied` (a money budget and a model without a price).
 */
export type ReserveResult =
  | { kind: 'admit'; settle: (used: BudgetUse) => Promise<void> }
  | { kind: 'refuse'; error: CortexError; retryAfterMs: number | null };

/** One budget's spend in its current window, as `GET /admin/keys/{id}` shows it. */
export interface BudgetShown {
  spent: number;
  reserved: number;
  period: string;
}

/**
 * Token and money budgets of stored keys and accounts, in the KV bucket `cortex_limits`
 * (`budget.key.<id>` and `budget.account.<name>` in tokens, `money.key.<id>` and
 * `money.account.<name>` in billionths of `billing.currency`), changed by compare-and-set like the
 * rate limits. A request reserves a bound before dispatch in each budget that applies: its tokens,
 * and those tokens at its model's price. Once its response closed and its runs reported (finished,
 * failed, cancelled or the client gone: see RequestMeter), each reservation is settled with what they
 * used: the tokens, and the cost of their usage records. Reservations are renewed while held (also
 * while the gateway drains), so those of a dead gateway stop counting within RESERVATION_TTL_MS.
 */
@Injectable()
export class BudgetLedger implements OnModuleInit, OnApplicationShutdown {
  private readonly logger = new Logger('budgets');
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
  /** Money in `billing.currency`, counted in billionths. */
  private readonly money: BudgetUnit;

  constructor(
    private readonly bucket: LimitsBucket,
    private readonly writes: FinalWrites,
    @Inject(CONFIG) config: CortexConfig,
  ) {
    this.money = { name: 'money', unit: config.billing.currency, amount: formatMoney };
  }

  onModuleInit(): void {
    this.held.start(RENEW_EVERY_MS);
  }

  onApplicationShutdown(): void {
    this.held.stop();
  }

  /**
   * Reserves `ask` in the key's and the account's budgets for the request `requestId`; `settle` turns the reservations
   * into what it used.
   */
  async reserve(
    key: KeyRecord,
    account: AccountRecord | undefined,
    requestId: string,
    ask: BudgetAsk,
  ): Promise<ReserveResult> {
    const scopes = [
      ...this.scopesOf(`key.${key.id}`, key.limits, `the key ${key.id} ("${key.name}")`),
      ...(account ? this.scopesOf(`account.${account.name}`, account.limits, `the account ${account.name}`) : []),
    ];
    if (scopes.length === 0) return { kind: 'admit', settle: () => Promise.resolve() };
    const priced = scopes.find((s) => s.counts === 'money');
    if (priced && ask.money === null)
      return {
        kind: 'refuse',
        error: new CortexError(
          'permission_denied',
          `${priced.label} has a money budget, and the model "${ask.model}" has no price in the catalogue, ` +
            'so nothing bounds what a request would spend: use a model with a cost, or give this one a cost ' +
            '(PATCH /admin/models/<id> with {"cost": {"input": …, "output": …}})',
          { param: 'model' },
        ),
        retryAfterMs: null,
      };
    // Unique per reservation: two requests under one x-request-id hold two.
    const id = `${requestId}.${randomUUID().slice(0, 8)}`;
    const admitted: Scope[] = [];
    for (const scope of scopes) {
      const amount = scope.counts === 'tokens' ? ask.tokens : (ask.money ?? 0);
      const decision = await this.bucket
        .change(scope.entry, EMPTY_BUDGET, (state: BudgetState, now) => {
          const d = reserve(state, scope.budget, id, { amount, expiresAt: now + RESERVATION_TTL_MS }, now);
          return { next: d.kind === 'admit' ? d.next : null, result: d };
        })
        .catch(async (error: unknown) => {
          // The key's reservation may be made already: take it back, or it would be renewed for ever.
          await Promise.all(admitted.map((s) => this.finish(s, id, 0, false).catch(() => undefined)));
          throw error;
        });
      if (decision.kind === 'refuse') {
        await Promise.all(admitted.map((s) => this.finish(s, id, 0, false).catch(() => undefined)));
        const refusal = refusalOf(scope.label, scope.budget, scope.unit, decision);
        return {
          kind: 'refuse',
          error: new CortexError(
            refusal.code,
            refusal.message,
            refusal.retryAfterMs === null ? {} : { retryAfter: refusal.retryAfterMs / 1_000 },
          ),
          retryAfterMs: refusal.retryAfterMs,
        };
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
            this.finish(s, id, used[s.counts]).catch((error: Error) =>
              this.logger.warn(
                `could not settle ${s.entry} (${error.message}); the request is not charged, ` +
                  `and its reservation stops counting within ${RESERVATION_TTL_MS / 1000} s`,
              ),
            ),
          ),
        );
      },
    };
  }

  /**
   * Spent and reserved of the key's budgets now, for `GET /admin/keys/{id}`: tokens, and money in
   * `billing.currency` (to the billionth); null where the key has no such budget.
   */
  async usage(
    key: KeyRecord,
    now = Date.now(),
  ): Promise<{ token_budget: BudgetShown | null; money_budget: (BudgetShown & { currency: string }) | null }> {
    const shown = async (scope: Scope | undefined): Promise<BudgetShown | null> => {
      if (!scope) return null;
      const state = current(await this.bucket.read<BudgetState>(scope.entry, EMPTY_BUDGET), scope.budget.window, now);
      return { spent: state.spent, reserved: reservedOf(state), period: state.period };
    };
    const scopes = this.scopesOf(`key.${key.id}`, key.limits, key.id);
    const [tokens, money] = await Promise.all([
      shown(scopes.find((s) => s.counts === 'tokens')),
      shown(scopes.find((s) => s.counts === 'money')),
    ]);
    return {
      token_budget: tokens,
      money_budget: money && {
        spent: money.spent / 1e9,
        reserved: money.reserved / 1e9,
        period: money.period,
        currency: this.money.unit,
      },
    };
  }

  /** The budgets `limits` sets for one owner (`key.<id>` or `account.<name>`): tokens first, then money. */
  private scopesOf(owner: string, limits: Limits, label: string): Scope[] {
    const scopes: Scope[] = [];
    if (limits.token_budget)
      scopes.push({
        entry: `budget.${owner}`,
        budget: { limit: limits.token_budget.tokens, window: limits.token_budget.window },
        label,
        unit: TOKENS,
        counts: 'tokens',
      });
    if (limits.money_budget)
      scopes.push({
        entry: `money.${owner}`,
        budget: { limit: billionthsOf(limits.money_budget.amount), window: limits.money_budget.window },
        label,
        unit: this.money,
        counts: 'money',
      });
    return scopes;
  }

  /**
   * Turns the reservation into spend. While NATS does not take the write (a restart) it is tried again
   * (FinalWrites: for about as long as a usage record's publish, and waited for when the gateway stops),
   * the reservation still held and renewed meanwhile, so a request that ends during the outage is
   * charged once NATS is back, as its usage record is stored then. A settlement tried again after a
   * write whose answer was lost counts once (the entry remembers it). An admission taken back (`retry`
   * false: nothing spent) is not worth a wait: its reservation expires.
   */
  private async finish(scope: Scope, id: string, used: number, retry = true): Promise<void> {
    const write = (): Promise<null> =>
      this.bucket.change(scope.entry, EMPTY_BUDGET, (state: BudgetState, now) => ({
        next: settle(state, scope.budget.window, id, used, now),
        result: null,
      }));
    try {
      await (retry ? this.writes.write(write) : write());
    } finally {
      this.held.delete(scope.entry, id);
    }
  }
}
