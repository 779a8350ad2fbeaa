import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { windowHeaders } from './rate-limits.js';

const NOW = Date.parse('2026-06-01T12:00:00.250Z');

describe('rate limit headers', () => {
  const cases: Array<[string, boolean, Record<string, string>]> = [
    ['OpenAI routes: reset as a Go duration', false, { 'x-ratelimit-limit-requests': '60', 'x-ratelimit-remaining-requests': '59', 'x-ratelimit-reset-requests': '1s' }],
    // Anthropic: an RFC 3339 time, rounded up to the second so a client never retries early.
    ['/v1/messages: reset as an RFC 3339 time', true, { 'anthropic-ratelimit-requests-limit': '60', 'anthropic-ratelimit-requests-remaining': '59', 'anthropic-ratelimit-requests-reset': '2026-06-01T12:00:02Z' }],
  ];
  for (const [what, anthropic, expected] of cases) {
    it(`rate limit headers - ${what}`, () => assert.deepEqual(windowHeaders({ limit: 60, remaining: 59, resetMs: 1_000 }, anthropic, NOW), expected));
  }
  it('rate limit headers - a long reset reads as OpenAI writes it', () => {
    assert.equal(windowHeaders({ limit: 10, remaining: 0, resetMs: 360_000 }, false, NOW)['x-ratelimit-reset-requests'], '6m0s');
  });
});
