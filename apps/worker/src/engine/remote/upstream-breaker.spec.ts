import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { REST_MS, SERVER_ERRORS_IN_A_ROW, UpstreamBreaker } from './upstream-breaker.js';

describe('upstream breaker', () => {
  it(`upstream breaker - ${SERVER_ERRORS_IN_A_ROW} 5xx in a row rest the upstream; a try after it ends the rest or starts the next`, () => {
    const breaker = new UpstreamBreaker();
    // Read through a function: an assertion on the getter must not narrow its later reads.
    const failing = () => breaker.failing;
    breaker.answered(503, 'overloaded', 0);
    breaker.answered(502, '', 10);
    assert.equal(breaker.resting(20), null, 'two in a row: still asked');
    assert.equal(breaker.failing, null);
    breaker.answered(503, 'overloaded', 30);
    assert.match(
      breaker.resting(40)?.why ?? '',
      /^answers HTTP 503: overloaded \(3 in a row\), so it is not asked for 10 s$/,
    );
    assert.equal(breaker.resting(40)?.forMs, REST_MS - 10);
    assert.deepEqual(breaker.failing, { since: 30, error: 'answers HTTP 503: overloaded (3 in a row)' });
    // The rest is over: one request tries it, and fails again.
    assert.equal(breaker.resting(30 + REST_MS), null);
    assert.ok(breaker.failing, 'still failing until an answer says otherwise');
    breaker.answered(500, 'boom', 30 + REST_MS);
    assert.equal(breaker.resting(31 + REST_MS)?.forMs, REST_MS - 1, 'the next rest starts at once');
    assert.equal(failing()?.since, 30, 'failing since the first rest');
    // The next try gets an answer that is not a server error: back to normal.
    breaker.answered(200, '', 30 + 2 * REST_MS);
    assert.equal(breaker.resting(30 + 2 * REST_MS), null);
    assert.equal(failing(), null);
  });

  it('upstream breaker - a refusal of the request (4xx) is an answer: it breaks the run of server errors', () => {
    const breaker = new UpstreamBreaker();
    breaker.answered(503, '', 0);
    breaker.answered(503, '', 1);
    breaker.answered(429, 'slow down', 2);
    breaker.answered(503, '', 3);
    breaker.answered(503, '', 4);
    assert.equal(breaker.resting(5), null, 'two in a row since the 429');
    assert.equal(breaker.failing, null);
  });
});
