import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { errorMessage, retryAfterSeconds, upstreamRefusal } from './upstream-failure.js';

describe('upstream failure', () => {
  it('upstream failure - a refusal by its status: the request’s fault reaches the client, the upstream’s goes elsewhere', () => {
    const cases: Array<[number, string, string, number | undefined]> = [
      [400, 'invalid_request', 'temperature: must be at most 2', undefined],
      [422, 'invalid_request', 'bad', undefined],
      [413, 'payload_too_large', 'too big', undefined],
      [429, 'upstream_rate_limited', 'slow down', 7],
      [401, 'upstream_unavailable', 'bad key', undefined],
      [403, 'upstream_unavailable', 'forbidden', undefined],
      [404, 'upstream_unavailable', 'no such model', undefined],
      [408, 'upstream_unavailable', 'timeout', undefined],
      [500, 'upstream_unavailable', 'boom', undefined],
      [529, 'upstream_unavailable', 'overloaded', undefined],
    ];
    for (const [status, code, message, retryAfter] of cases) {
      const error = upstreamRefusal({ status, message, upstream: 'up:8080 (chat)', ...(retryAfter && { retryAfter }) });
      assert.equal(error.code, code, `${status}`);
      assert.match(error.message, new RegExp(message), `${status}: the upstream's words`);
      if (retryAfter) assert.equal(error.extra.retryAfter, retryAfter, `${status}: Retry-After passed on`);
    }
    assert.equal(
      upstreamRefusal({ status: 400, message: 'temperature: too hot', upstream: 'u' }).extra.param,
      'temperature',
    );
    assert.equal(upstreamRefusal({ status: 429, message: '', upstream: 'u' }).extra.retryAfter, 1);
  });

  it('upstream failure - Retry-After in seconds or as a date, bounded; error bodies of each vendor read', () => {
    const now = Date.parse('2026-12-01T00:00:00Z');
    assert.equal(retryAfterSeconds('12', now), 12);
    assert.equal(retryAfterSeconds('Tue, 01 Dec 2026 00:00:30 GMT', now), 30);
    assert.equal(retryAfterSeconds('999999', now), 3600);
    assert.equal(retryAfterSeconds('soon', now), undefined);
    assert.equal(retryAfterSeconds(null, now), undefined);
    assert.equal(errorMessage('{"error":{"message":"Rate limit reached","type":"requests"}}'), 'Rate limit reached');
    assert.equal(
      errorMessage('{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'),
      'Overloaded',
    );
    assert.equal(errorMessage('{"detail":"Not Found"}'), 'Not Found');
    assert.equal(errorMessage('{"error":"model not found"}'), 'model not found');
    assert.equal(errorMessage('<html>\n502 Bad Gateway\n</html>'), '<html> 502 Bad Gateway </html>');
  });
});
