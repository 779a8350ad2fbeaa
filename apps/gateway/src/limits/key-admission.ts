import { Inject, Injectable, Logger } from '@nestjs/common';
import { CONFIG, type CortexConfig, type LimitsUnavailableConfig } from '@cortex/config';
import { ModelCatalogue } from '@cortex/bus';
import { CortexError, type KeyRecord } from '@cortex/contracts';
import { KeyDirectory } from '../keys/key-directory.js';
import type { RequestMeter } from '../usage/request-meter.js';
import { FinalWrites } from '../usage/final-writes.js';
import { BudgetLedger } from './budget-ledger.js';
import type { RequestWindow } from './rate-limit.decider.js';
import { RateLimiter } from './rate-limiter.js';
import { moneyReservation } from './money.decider.js';
import { reservationBound } from './reservation.js';
import type { TokenWindow } from './token-rate.decider.js';
import { TokenRateLimiter } from './token-rate-limiter.js';

/** How long after its response closed a request's runs may take to report their usage (a cancelled run's takes about a second). */
export const SETTLE_BOUND_MS = 60_000;
/** A background response's reply closes at once while its run goes on. */
export const BACKGROUND_SETTLE_BOUND_MS = 30 * 60_000;

const logger = new Logger('limits');

const CHECKS: Record<keyof LimitsUnavailableConfig, string> = {
  requests: 'requests per minute and concurrent requests',
  tokens: 'tokens per minute',
  budget: 'token and money budgets',
};

/** One request of a stored key that asks to start work on a worker. */
export interface AdmissionAsk {
  key: KeyRecord;
  /** The request's id, in its reservations' names. */
  requestId: string;
  /** What its runs report, and who pays for it: billed to this key once admitted, settled with what they used. */
  meter: RequestMeter;
  /** The route's path, which says what its reservation counts (limits/reservation.ts). */
  path: string;
  body: unknown;
  /** The body's size as received. */
  bytes: number;
  /** A background response: its reply closes at once while its run goes on. */
  background: boolean;
}

export type KeyAdmissionResult =
  | { kind: 'admit'; requests: RequestWindow | null; tokens: TokenWindow | null; done: () => void }
  /** `retryAfterMs: null` is a spent budget: retrying does not help until it resets or is raised. */
  | {
      kind: 'refuse';
      requests: RequestWindow | null;
      tokens: TokenWindow | null;
      error: CortexError;
      retryAfterMs: number | null;
    };

/**
 * The limits of a stored key and its account, in the order every route applies them: the request
 * windows (rate-limiter.ts), tokens per minute (token-rate-limiter.ts), then the token and money
 * budgets (budget-ledger.ts); the last two reserve the request's bound (money: that bound at its
 * model's price) and settle with the usage it reports (money: the cost of its usage records).
 * An admitted request's meter is billed to its key and account (its usage records say so); it holds
 * its concurrency lease until `done` (its HTTP response closed, or its WebSocket turn ended; a
 * background response's until its run ends), and its reservations until its runs have reported what
 * they used. HTTP requests (http/rate-limits.ts) and WebSocket turns (responses/ws) both come here,
 * so neither way around the other's limits exists.
 */
@Injectable()
export class KeyAdmission {
  constructor(
    private readonly limiter: RateLimiter,
    private readonly tokens: TokenRateLimiter,
    private readonly budgets: BudgetLedger,
    private readonly directory: KeyDirectory,
    private readonly catalogue: ModelCatalogue,
    private readonly writes: FinalWrites,
    @Inject(CONFIG) private readonly config: CortexConfig,
  ) {}

  async admit(ask: AdmissionAsk): Promise<KeyAdmissionResult> {
    try {
      return await this.decide(ask);
    } catch (error) {
      // A check that could not be made (NATS unreachable, its store full) and is not let through by
      // gateway.limits_unavailable: never a limited key through unlimited, never a 500.
      const refusal =
        error instanceof CortexError
          ? error
          : new CortexError(
              'service_unavailable',
              `the key's limits cannot be checked now (${(error as Error).message}); retry`,
              { retryAfter: 1, cause: error },
            );
      return {
        kind: 'refuse',
        requests: null,
        tokens: null,
        error: refusal,
        retryAfterMs: (refusal.toBody().retryAfter ?? 1) * 1_000,
      };
    }
  }

  private async decide(ask: AdmissionAsk): Promise<KeyAdmissionResult> {
    const { key, requestId } = ask;
    const account = this.directory.account(key.account);
    const rate = await this.unless('requests', key, () => this.limiter.admit(key, account), {
      kind: 'admit',
      requests: null,
      release: () => Promise.resolve(),
    });
    if (rate.kind === 'refuse')
      return {
        kind: 'refuse',
        requests: rate.requests,
        tokens: null,
        error: rate.error,
        retryAfterMs: rate.retryAfterMs,
      };
    const named = (ask.body as { model?: unknown } | null)?.model;
    const model = typeof named === 'string' ? this.catalogue.find(named) : undefined;
    const bound = reservationBound(ask.path, ask.body, ask.bytes, model?.contextSize);
    const reserved = bound.prompt + bound.output;
    const perMinute = await this.unless('tokens', key, () => this.tokens.admit(key, account, reserved), {
      kind: 'admit',
      window: null,
      settle: () => Promise.resolve(),
    }).catch(async (error: unknown) => {
      await rate.release();
      throw error;
    });
    if (perMinute.kind === 'refuse') {
      await rate.release();
      return {
        kind: 'refuse',
        requests: rate.requests,
        tokens: perMinute.window,
        error: perMinute.error,
        retryAfterMs: perMinute.retryAfterMs,
      };
    }
    const budgetAsk = {
      tokens: reserved,
      money: moneyReservation(bound, model?.cost),
      model: typeof named === 'string' ? named : '(none)',
    };
    const budget = await this.unless('budget', key, () => this.budgets.reserve(key, account, requestId, budgetAsk), {
      kind: 'admit',
      settle: () => Promise.resolve(),
    }).catch(async (error: unknown) => {
      await Promise.all([rate.release(), perMinute.settle(0)]);
      throw error;
    });
    if (budget.kind === 'refuse') {
      await Promise.all([rate.release(), perMinute.settle(0)]);
      return {
        kind: 'refuse',
        requests: rate.requests,
        tokens: perMinute.window,
        error: budget.error,
        retryAfterMs: budget.retryAfterMs,
      };
    }
    // Its usage records are billed to this key and account.
    ask.meter.bill({ account: key.account, keyId: key.id });
    let ended = false;
    const done = (): void => {
      if (ended) return;
      ended = true;
      // A background response's reply closes at once while its run goes on: the run holds the slot.
      if (!ask.background) void rate.release();
      ask.meter.close();
      // Settled once every run of the request reported what it used (a background response's run goes
      // on after its reply closed); the bound only guards against a run that never reports.
      const settleBound = ask.background ? BACKGROUND_SETTLE_BOUND_MS : SETTLE_BOUND_MS;
      // Kept for the gateway's shutdown to wait for (FinalWrites): a request that ended just before is charged.
      void this.writes.track(
        settledWithin(ask.meter, settleBound).then(async (used) => {
          await Promise.all([
            budget.settle({ tokens: used, money: ask.meter.cost }),
            perMinute.settle(used),
            ask.background && rate.release(),
          ]);
        }),
      );
    };
    return { kind: 'admit', requests: rate.requests, tokens: perMinute.window, done };
  }

  /**
   * One check of the key's limits; when it cannot be made (its bucket unreadable or full) the
   * configured policy (`gateway.limits_unavailable`) either refuses (the error goes on to a 503) or
   * admits the request uncounted by that check.
   */
  private async unless<T>(
    check: keyof LimitsUnavailableConfig,
    key: KeyRecord,
    work: () => Promise<T>,
    uncounted: T,
  ): Promise<T> {
    try {
      return await work();
    } catch (error) {
      if (this.config.gateway.limitsUnavailable[check] !== 'admit') throw error;
      logger.warn(
        `key ${key.id}: its ${CHECKS[check]} cannot be counted now (${(error as Error).message}); ` +
          `admitted without counting it (gateway.limits_unavailable.${check}: admit)`,
      );
      return uncounted;
    }
  }
}

/** The meter's total once settled, or what it has after `boundMs` (a run that never reported is logged). */
function settledWithin(meter: RequestMeter, boundMs: number): Promise<number> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      logger.warn(
        `a request's runs did not all report their usage within ${boundMs / 1000} s; it is charged what they reported`,
      );
      resolve(meter.reported);
    }, boundMs).unref();
    void meter.settled.then((used) => {
      clearTimeout(timer);
      resolve(used);
    });
  });
}
