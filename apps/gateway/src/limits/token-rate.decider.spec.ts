import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { admitTokens, EMPTY_TOKENS, settleTokens, tokenWindow, type TokenState } from './token-rate.decider.js';

const T0 = Date.parse('2026-11-25T00:00:00Z');

describe('tokens per minute decider', () => {
  it('tpm - admitted while the bucket is not full: a minute of 1000 tokens admits 300-token requests until 1200 are reserved', () => {
    let state: TokenState = EMPTY_TOKENS;
    const kinds: string[] = [];
    for (let i = 0; i < 5; i++) {
      const d = admitTokens(state, 1_000, 300, T0);
      kinds.push(d.kind);
      if (d.kind === 'admit') state = d.next;
    }
    assert.deepEqual(kinds, ['admit', 'admit', 'admit', 'admit', 'refuse']);
    assert.equal(state.tat - T0, 72_000);
  });

  for (const [name, reserved, used, remaining] of [
    ['used all it reserved', 600, 600, 400],
    ['used a part', 600, 100, 900],
    ['used nothing (failed, cancelled)', 600, 0, 1_000],
  ] as const) {
    it(`tpm - settling gives back what was not used: ${name}`, () => {
      const d = admitTokens(EMPTY_TOKENS, 1_000, reserved, T0);
      assert.equal(d.kind, 'admit');
      if (d.kind !== 'admit') return;
      assert.equal(d.window.remaining, 400);
      const settled = settleTokens(d.next, 1_000, reserved, used, T0);
      assert.equal(tokenWindow(1_000, settled.tat, T0).remaining, remaining);
    });
  }

  it('tpm - a refusal says when one token is free again, and the window refills at the rate', () => {
    const full = admitTokens(EMPTY_TOKENS, 600, 900, T0);
    assert.equal(full.kind, 'admit');
    if (full.kind !== 'admit') return;
    // 900 tokens at 100 ms each: the bucket is 90 s ahead, 30 s past a full minute.
    assert.deepEqual(full.window, { limit: 600, remaining: 0, resetMs: 90_000 });
    const refused = admitTokens(full.next, 600, 1, T0);
    assert.equal(refused.kind, 'refuse');
    if (refused.kind !== 'refuse') return;
    assert.equal(refused.retryAfterMs, 30_100);
    assert.equal(admitTokens(full.next, 600, 1, T0 + 30_100).kind, 'admit');
    assert.deepEqual(tokenWindow(600, full.next.tat, T0 + 60_000), { limit: 600, remaining: 300, resetMs: 30_000 });
    assert.deepEqual(tokenWindow(600, full.next.tat, T0 + 100_000), { limit: 600, remaining: 600, resetMs: 0 });
  });
});
