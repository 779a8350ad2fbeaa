import { Injectable } from '@nestjs/common';
import { ModelCatalogue } from '@cortex/bus';
import { CortexError, type KeyRecord } from '@cortex/contracts';
import { KeyDirectory } from '../keys/key-directory.js';
import { UsageRecorder } from '../usage/usage-recorder.js';
import { BACKGROUND_USAGE_WAIT_MS, BudgetLedger, USAGE_WAIT_MS } from './budget-ledger.js';
import type { RequestWindow } from './rate-limit.decider.js';
import { RateLimiter } from './rate-limiter.js';
import { reservationFor } from './reservation.js';
import type { TokenWindow } from './token-rate.decider.js';
import { TokenRateLimiter } from './token-rate-limiter.js';

/** One request of a stored key that asks to start work on a worker. */
export interface AdmissionAsk {
  key: KeyRecord;
  /** The id its runs report their usage under. */
  requestId: string;
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
  | { kind: 'refuse'; requests: RequestWindow | null; tokens: TokenWindow | null; error: CortexError; retryAfterMs: number | null };

/**
 * The limits of a stored key and its account, in the order every route applies them: the request
 * windows (rate-limiter.ts), tokens per minute (token-rate-limiter.ts), then the token budgets
 * (budget-ledger.ts); the last two reserve the request's bound and settle with the usage it reports.
 * An admitted request is attributed to its key and account for its usage records, and holds its
 * concurrency lease and reservation until `done` (its HTTP response closed, or its WebSocket turn
 * ended). HTTP requests (http/rate-limits.ts) and WebSocket turns (responses/ws) both come here, so
 * neither way around the other's limits exists.
 */
@Injectable()
export class KeyAdmission {
  constructor(
    private readonly limiter: RateLimiter,
    private readonly tokens: TokenRateLimiter,
    private readonly budgets: BudgetLedger,
    private readonly directory: KeyDirectory,
    private readonly usage: UsageRecorder,
    private readonly catalogue: ModelCatalogue,
  ) {}

  async admit(ask: AdmissionAsk): Promise<KeyAdmissionResult> {
    try {
      return await this.decide(ask);
    } catch (error) {
      // NATS unreachable: never let a limited key through unlimited, never a 500.
      const refusal =
        error instanceof CortexError ? error : new CortexError('service_unavailable', `the key's limits cannot be checked now (${(error as Error).message}); retry`, { retryAfter: 1, cause: error });
      return { kind: 'refuse', requests: null, tokens: null, error: refusal, retryAfterMs: (refusal.toBody().retryAfter ?? 1) * 1_000 };
    }
  }

  private async decide(ask: AdmissionAsk): Promise<KeyAdmissionResult> {
    const { key, requestId } = ask;
    const account = this.directory.account(key.account);
    const rate = await this.limiter.admit(key, account);
    if (rate.kind === 'refuse') return { kind: 'refuse', requests: rate.requests, tokens: null, error: rate.error, retryAfterMs: rate.retryAfterMs };
    const model = (ask.body as { model?: unknown } | null)?.model;
    const reserved = reservationFor(ask.path, ask.body, ask.bytes, typeof model === 'string' ? this.contextSizeOf(model) : undefined);
    const perMinute = await this.tokens.admit(key, account, reserved).catch(async (error: unknown) => {
      await rate.release();
      throw error;
    });
    if (perMinute.kind === 'refuse') {
      await rate.release();
      return { kind: 'refuse', requests: rate.requests, tokens: perMinute.window, error: perMinute.error, retryAfterMs: perMinute.retryAfterMs };
    }
    const budget = await this.budgets.reserve(key, account, requestId, reserved, perMinute.window !== null).catch(async (error: unknown) => {
      await Promise.all([rate.release(), perMinute.settle(0)]);
      throw error;
    });
    if (budget.kind === 'refuse') {
      await Promise.all([rate.release(), perMinute.settle(0)]);
      return { kind: 'refuse', requests: rate.requests, tokens: perMinute.window, error: budget.error, retryAfterMs: budget.retryAfterMs };
    }
    // Its usage records are billed to this key and account.
    const owner = this.usage.attribute(requestId, { account: key.account, keyId: key.id });
    const wait = ask.background ? BACKGROUND_USAGE_WAIT_MS : USAGE_WAIT_MS;
    let ended = false;
    const done = (): void => {
      if (ended) return;
      ended = true;
      void rate.release();
      owner.forget(2 * wait);
      // A background response answers at once and runs on: its usage comes when the run ends.
      void budget.settle(wait).then((used) => perMinute.settle(used));
    };
    return { kind: 'admit', requests: rate.requests, tokens: perMinute.window, done };
  }

  private contextSizeOf(name: string): number | undefined {
    return this.catalogue.find(name)?.contextSize;
  }
}
