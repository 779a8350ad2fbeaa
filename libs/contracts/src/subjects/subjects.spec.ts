import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  backgroundResponseSubjects,
  backgroundSubject,
  everyWorker,
  ForgedEventError,
  fromItsWorker,
  fromWorker,
  streamRunId,
  streamSubject,
  Subjects,
  workerEventOf,
  workerEventSubject,
} from './subjects.js';

describe('subjects', () => {
  it("subjects - a run's stream names the worker it was placed on; a background run's, its response and worker", () => {
    assert.equal(streamSubject('worker-cpu0', 'ab12'), 'llm.stream.v1.worker-cpu0.ab12');
    assert.equal(backgroundSubject('resp_1', 'worker-cpu0', 'ab12'), 'llm.background.v1.resp_1.worker-cpu0.ab12');
    assert.equal(backgroundResponseSubjects('resp_1'), 'llm.background.v1.resp_1.*.*');
    assert.throws(() => streamSubject('w.1', 'ab12'), /workerId "w.1"/);
    assert.throws(() => streamSubject('w1', '>'), /runId ">"/);
  });

  it('subjects - a worker event names its worker last; other subjects are no worker event', () => {
    const cases: Array<[string, ReturnType<typeof workerEventOf>]> = [
      [workerEventSubject(Subjects.modelLoaded, 'w1'), { event: Subjects.modelLoaded, workerId: 'w1' }],
      ['llm.evt.v1.model.load_failed.worker-gpu0', { event: Subjects.modelLoadFailed, workerId: 'worker-gpu0' }],
      ['llm.evt.v1.worker.defragmented.w2', { event: Subjects.workerDefragmented, workerId: 'w2' }],
      [Subjects.modelLoaded, null],
      [Subjects.requestFinished, null],
      ['llm.evt.v1.replica.added', null],
      ['llm.evt.v1.worker.up.w1', null],
    ];
    for (const [subject, expected] of cases) assert.deepEqual(workerEventOf(subject), expected, subject);
    assert.equal(everyWorker(Subjects.modelUnloaded), 'llm.evt.v1.model.unloaded.*');
  });

  it("subjects - a message about a worker counts only when its subject is that worker's", () => {
    const cases: Array<[string, string, boolean]> = [
      ['llm.hb.v1.worker.w1', 'w1', true],
      ['llm.hb.v1.worker.w1', 'w2', false],
      ['llm.evt.v1.model.loaded.worker-gpu0', 'worker-cpu0', false],
      ['llm.evt.v1.model.loaded.worker-cpu0', 'worker-cpu0', true],
      ['llm.evt.v1.model.loaded', 'worker-cpu0', false],
    ];
    for (const [subject, named, expected] of cases)
      assert.equal(fromItsWorker(subject, named), expected, `${subject} naming ${named}`);
    const event = { workerId: 'w1', model: 'm' };
    assert.equal(fromWorker('llm.evt.v1.model.loaded.w1', event), event);
    assert.throws(
      () => fromWorker('llm.evt.v1.model.loaded.w2', event),
      (error: unknown) =>
        error instanceof ForgedEventError &&
        error.named === 'w1' &&
        /names worker "w1", but only that worker may publish about itself/.test(error.message),
    );
  });

  it('subjects - a run id comes only from a token stream subject, and streamSubject round-trips', () => {
    const cases: Array<[string, string | null]> = [
      [streamSubject('worker-cpu0', 'run_1'), 'run_1'],
      ['llm.stream.v1.', null],
      ['llm.stream.v1.run_1', null],
      ['llm.stream.v1.a.b.c', null],
      ['llm.evt.v1.request.finished', null],
      ['llm.background.v1.resp_1.w1.run_1', null],
    ];
    for (const [subject, expected] of cases) assert.equal(streamRunId(subject), expected, subject);
  });
});
