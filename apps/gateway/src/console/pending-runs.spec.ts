import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { PendingRuns } from './pending-runs.js';

describe('pending runs', () => {
  it('console - a request is one row from placement to its end, whatever its retries', () => {
    const runs = new PendingRuns();
    runs.placing('q1', 'q1', 'r1', 'm', 1_000);
    assert.deepEqual(runs.list(), [{ requestId: 'q1', runId: 'r1', model: 'm', workerId: null, since: 1_000 }]);
    runs.placed('q1', 'w1');
    assert.equal(runs.list()[0]?.workerId, 'w1');
    // A retry places it again under a new run id: the same row, not placed yet, since its first placement.
    runs.placing('q1', 'q1', 'r2', 'm', 2_000);
    assert.deepEqual(runs.list(), [{ requestId: 'q1', runId: 'r2', model: 'm', workerId: null, since: 1_000 }]);
    runs.placed('gone', 'w2');
    assert.equal(runs.size, 1, 'a placement for a request not tracked adds nothing');
    runs.done('q1');
    assert.equal(runs.size, 0);
  });

  it('console - the list is a copy; requests older than the limit are swept', () => {
    const runs = new PendingRuns();
    runs.placing('q1', 'q1', 'r1', 'm', 1_000);
    runs.placing('q2', 'q2', 'r2', 'm', 5_000);
    const listed = runs.list();
    listed[0]!.workerId = 'changed';
    assert.equal(runs.list()[0]?.workerId, null);
    runs.sweep(6_000, 4_000);
    assert.deepEqual(
      runs.list().map((r) => r.requestId),
      ['q2'],
    );
  });
});
