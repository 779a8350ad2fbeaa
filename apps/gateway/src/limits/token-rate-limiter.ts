import { Injectable } from '@nestjs/common';
import { CortexError, type AccountRecord, type KeyRecord } from '@cortex/contracts';
import { LimitsBucket } from './limits-bucket.js';
import { admitTokens, EMPTY_TOKENS, settleTokens, type TokenState, type TokenWindow } from './token-rate.decider.js';

interface Scope {
  entry: string;
  tpm: number;
  label: string;
}

export type TokenAdmission =
  | { kind: 'admit'; window: TokenWindow | null; settle: (used: number) => Promise<void> }
  | { kind: 'refuse'; error: CortexError; retryAfterMs: number; window: TokenWindow };

/**
 * Tokens per minute of stored keys and accounts, in the KV bucket `cortex_limits` (`tpm.key.<id>`,
 * `tpm.account.<name>`), changed by compare-and-set like the request windows. A request takes its
 * reservation's tokens before dispatch (token-rate.decider.ts); `settle` gives back what it did not
 * use. A gateway that dies before settling leaves its reservation counted: it drains at the rate,
 * within a minute of the bucket's size.
 */
@Injectable()
export class TokenRateLimiter {
  constructor(private readonly bucket: LimitsBucket) {}

  /** Whether a request of `key` reserving `tokens` may start now; on admission, `settle` must be called once with what it used. */
  async admit(key: KeyRecord, account: AccountRecord | undefined, tokens: number): Promise<TokenAdmission> {
    const scopes: Scope[] = [];
    if (key.limits.tokens_per_minute !== undefined)
      scopes.push({
        entry: `tpm.key.${key.id}`,
        tpm: key.limits.tokens_per_minute,
        label: `the key ${key.id} ("${key.name}")`,
      });
    if (account?.limits.tokens_per_minute !== undefined)
      scopes.push({
        entry: `tpm.account.${account.name}`,
        tpm: account.limits.tokens_per_minute,
        label: `the account ${account.name}`,
      });
    if (scopes.length === 0) return { kind: 'admit', window: null, settle: () => Promise.resolve() };
    const admitted: Scope[] = [];
    let window: TokenWindow | null = null;
    const giveBack = (list: Scope[], used: number): Promise<unknown> =>
      Promise.all(
        list.map((s) =>
          this.bucket
            .change(s.entry, EMPTY_TOKENS, (state: TokenState, now) => ({
              next: settleTokens(state, s.tpm, tokens, used, now),
              result: null,
            }))
            .catch(() => undefined),
        ),
      );
    for (const scope of scopes) {
      const decision = await this.bucket.change(scope.entry, EMPTY_TOKENS, (state: TokenState, now) => {
        const d = admitTokens(state, scope.tpm, tokens, now);
        return { next: d.kind === 'admit' ? d.next : null, result: d };
      });
      if (decision.kind === 'refuse') {
        await giveBack(admitted, 0);
        const wait = decision.retryAfterMs;
        const message =
          `rate limit reached (tokens per minute): ${scope.label} has used its ${scope.tpm} tokens per minute ` +
          `(this request reserves ${tokens}); retry in ${(wait / 1000).toFixed(wait < 10_000 ? 1 : 0)} s`;
        return {
          kind: 'refuse',
          error: new CortexError('rate_limit_exceeded', message, { retryAfter: Math.ceil(wait / 1000) }),
          retryAfterMs: wait,
          window: decision.window,
        };
      }
      admitted.push(scope);
      // The headers report the window with the fewest tokens left.
      if (!window || decision.window.remaining < window.remaining) window = decision.window;
    }
    let settled = false;
    return {
      kind: 'admit',
      window,
      settle: async (used) => {
        if (settled) return;
        settled = true;
        await giveBack(admitted, Math.min(used, tokens));
      },
    };
  }
}
