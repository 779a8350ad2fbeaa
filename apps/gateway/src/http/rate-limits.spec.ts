import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { tokenHeaders, windowHeaders } from './rate-limits.js';

const NOW = Date.parse('2026-06-01T12:00:00.250Z');

describe('rate limit headers', () => {
  const cases: Array<[string, boolean, Record<string, string>]> = [
    [
      'OpenAI routes: reset as a Go duration',
      false,
      {
        'x-ratelimit-limit-requests': '60',
        'x-ratelimit-remaining-requests': '59',
        'x-ratelimit-reset-requests': '1s',
      },
    ],
    // Anthropic: an RFC 3339 time, rounded up to the second so a client never retries early.
    [
      '/v1/messages: reset as an RFC 3339 time',
      true,
      {
        'anthropic-ratelimit-requests-limit': '60',
        'anthropic-ratelimit-requests-remaining': '59',
        'anthropic-ratelimit-requests-reset': '2026-06-01T12:00:02Z',
      },
    ],
  ];
  for (const [what, anthropic, expected] of cases) {
    it(`rate limit headers - ${what}`, () =>
      assert.deepEqual(windowHeaders({ limit: 60, remaining: 59, resetMs: 1_000 }, anthropic, NOW), expected));
  }
  it('rate limit headers - a long reset reads as OpenAI writes it', () => {
    assert.equal(
      windowHeaders({ limit: 10, remaining: 0, resetMs: 360_000 }, false, NOW)['x-ratelimit-reset-requests'],
      '6m0s',
    );
  });
  it('rate limit headers - tokens: x-ratelimit-*-tokens on OpenAI routes', () => {
    assert.deepEqual(tokenHeaders({ limit: 10_000, remaining: 7_500, resetMs: 15_000 }, false, NOW), {
      'x-ratelimit-limit-tokens': '10000',
      'x-ratelimit-remaining-tokens': '7500',
      'x-ratelimit-reset-tokens': '15s',
    });
  });
  it('rate limit headers - tokens on /v1/messages: one window for tokens, input-tokens and output-tokens', () => {
    const headers = tokenHeaders({ limit: 10_000, remaining: 7_500, resetMs: 15_000 }, true, NOW);
    for (const kind of ['tokens', 'input-tokens', 'output-tokens']) {
      assert.equal(headers[`anthropic-ratelimit-${kind}-limit`], '10000');
      assert.equal(headers[`anthropic-ratelimit-${kind}-remaining`], '7500');
      assert.equal(headers[`anthropic-ratelimit-${kind}-reset`], '2026-06-01T12:00:16Z');
    }
    assert.equal(Object.keys(headers).length, 9);
  });
});
