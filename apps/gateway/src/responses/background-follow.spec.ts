import { describe, it, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError, type StreamEvent } from '@cortex/contracts';
import { RunNotices } from '../inference/run-notices.js';
import { BackgroundFollow, type FollowedRun } from './background-follow.js';

interface Published {
  subject: string;
  type: string;
  code?: string;
  moving?: boolean;
}

/** A run as InferenceRun drives one through a move: its listeners hear it, and the next try's subject names its worker and run. */
function fixture(t: TestContext) {
  t.mock.timers.enable({ apis: ['setInterval'] });
  const calls: string[] = [];
  const notices = new RunNotices();
  const run: { subject: string | null } & Omit<FollowedRun, 'subject'> = {
    subject: 'llm.background.v1.resp_1.w1.r1',
    requestId: 'req',
    listen: (listener) => notices.listen(listener),
    fail: (error: CortexError) => void calls.push(`fail ${error.code}`),
    detach: () => void calls.push('detach'),
    cancel: (reason: string) => void calls.push(`cancel ${reason}`),
  };
  const published: Published[] = [];
  const follow = new BackgroundFollow(
    run,
    (subject, event) => {
      published.push({
        subject,
        type: event.type,
        ...(event.type === 'error' && { code: event.error.code }),
        moving: event.moving,
      });
    },
    1_000,
  );
  /** The run loses its worker: the move starts, and the next try starts on w2 with its own id. */
  const lose = (next: string) => {
    notices.emit({ type: 'moving' });
    run.subject = `llm.background.v1.resp_1.w2.${next}`;
  };
  return { run, notices, follow, published, calls, lose };
}

const text = (seq: number): StreamEvent => ({ seq, type: 'text', text: 'a', tokens: [1] });

describe('background follow', () => {
  it("background follow - reads the run to its end and records the worker's error; publishes nothing", async (t) => {
    const { follow, published, calls } = fixture(t);
    await follow.follow(
      (async function* () {
        yield text(1);
        yield { seq: 2, type: 'error', error: new CortexError('invalid_output', 'bad').toBody() } satisfies StreamEvent;
      })(),
    );
    assert.deepEqual(calls, ['fail invalid_output']);
    assert.deepEqual(published, []);
  });

  it(
    'background follow - while the run moves, keep-alives marked moving go ' +
      "on the lost run's subject, the first at once, and stop at the resume",
    async (t) => {
      const { notices, follow, published, lose } = fixture(t);
      await follow.follow(
        (async function* () {
          yield text(1);
          lose('r2');
          assert.equal(follow.isMoving, true);
          assert.equal(published.length, 1, 'the mark went out when the move began');
          t.mock.timers.tick(3_500);
          notices.emit({ type: 'resumed', workerId: 'w2' });
          t.mock.timers.tick(3_000);
          yield text(2);
        })(),
      );
      assert.deepEqual(
        published,
        Array.from({ length: 4 }, () => ({
          subject: 'llm.background.v1.resp_1.w1.r1',
          type: 'keepalive',
          moving: true,
        })),
      );
      assert.equal(follow.isMoving, false);
    },
  );

  it('background follow - a move that finds no worker ends the response with its error, on the lost run and the last try', async (t) => {
    const { follow, published, calls, lose } = fixture(t);
    await follow.follow(
      (async function* () {
        yield text(1);
        lose('r2');
        throw new CortexError('worker_lost', 'worker w1 is down');
      })(),
    );
    assert.deepEqual(published, [
      { subject: 'llm.background.v1.resp_1.w1.r1', type: 'keepalive', moving: true },
      { subject: 'llm.background.v1.resp_1.w1.r1', type: 'error', code: 'worker_lost', moving: true },
      { subject: 'llm.background.v1.resp_1.w2.r2', type: 'error', code: 'worker_lost', moving: true },
    ]);
    assert.deepEqual(calls, ['detach']);
  });

  it(
    'background follow - a cancel during the move stops the move and ' +
      "ends the response cancelled; outside a move it is the worker's",
    async (t) => {
      const { follow, published, calls, lose } = fixture(t);
      assert.equal(follow.cancelMove('by POST'), false, 'not moving: the worker hears the cancel');
      await follow.follow(
        (async function* () {
          yield text(1);
          lose('r2');
          assert.equal(follow.cancelMove('by POST'), true);
          throw new CortexError('cancelled', 'the request was cancelled while it moved');
        })(),
      );
      assert.deepEqual(calls, ['cancel by POST', 'detach']);
      assert.deepEqual(
        published.map((p) => p.code ?? p.type),
        ['keepalive', 'cancelled', 'cancelled'],
      );
    },
  );

  it('background follow - a read that fails without a move publishes nothing: the worker may still run it', async (t) => {
    const { follow, published, calls } = fixture(t);
    await follow.follow(
      (async function* () {
        yield text(1);
        throw new CortexError('worker_lost', 'the stream may not move');
      })(),
    );
    assert.deepEqual(published, []);
    assert.deepEqual(calls, ['detach']);
  });
});
