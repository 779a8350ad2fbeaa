import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { StreamEvent } from '@cortex/contracts';
import { BackgroundReplay, isTerminalStatus } from './responses.background.js';
import { encoderOptions, events, finish, start } from './responses.fixtures.js';

const { now: _now, ...options } = encoderOptions();
const stored = (runId: string, list: StreamEvent[], at = 1_700_000_009_000) =>
  list.map((event) => ({ runId, event, at }));

describe('responses background replay', () => {
  it('responses background replay - queued until a run starts; the frames and completed_at are the same on every replay', () => {
    const run = stored(
      'run1',
      events({ ...start, workerId: 'w1' }, { type: 'text', text: 'Hi' }, { type: 'keepalive' }, finish('stop')),
    );
    const first = new BackgroundReplay(options);
    assert.equal(first.resource().status, 'queued');
    const frames = run.flatMap((event) => first.add(event));
    const again = new BackgroundReplay(options);
    assert.deepEqual(
      run.flatMap((event) => again.add(event)),
      frames,
    );
    assert.equal(first.resource().status, 'completed');
    assert.equal(first.resource().completed_at, 1_700_000_009);
    assert.deepEqual(first.run, { runId: 'run1', workerId: 'w1' });
    assert.ok(first.ended);
  });

  it('responses background replay - a run replaced before its first token is ignored, late events included', () => {
    const replay = new BackgroundReplay(options);
    const abandoned = stored('old', events({ ...start, workerId: 'w1' }));
    const current = stored(
      'new',
      events({ ...start, workerId: 'w2' }, { type: 'text', text: 'Hello' }, finish('stop')),
    );
    const late = stored(
      'old',
      events({ type: 'keepalive' }, finish('cancelled')).map((e, i) => ({ ...e, seq: i + 1 })),
    );
    const frames = [...abandoned, current[0], ...late, ...current.slice(1)].flatMap((event) =>
      event ? replay.add(event) : [],
    );
    assert.deepEqual(replay.run, { runId: 'new', workerId: 'w2' });
    assert.equal(replay.resource().status, 'completed');
    // Numbered as one stream: created and in_progress once, then the new run's output.
    assert.deepEqual(
      frames.map((f) => f.data.sequence_number),
      frames.map((_f, i) => i),
    );
    assert.equal(frames.filter((f) => f.event === 'response.created').length, 1);
  });

  it('responses background replay - a cancelled run ends cancelled, without an error', () => {
    const replay = new BackgroundReplay(options);
    const frames = stored('run1', events(start, { type: 'text', text: 'Hi' }, finish('cancelled'))).flatMap((event) =>
      replay.add(event),
    );
    const last = frames.at(-1)?.data;
    assert.ok(last && 'response' in last);
    assert.equal(last.response.status, 'cancelled');
    assert.equal(last.response.error, null);
    assert.equal(replay.resource().status, 'cancelled');
    assert.ok(isTerminalStatus('cancelled') && !isTerminalStatus('queued') && !isTerminalStatus('in_progress'));
  });

  it(
    'responses background replay - a run moved from a lost worker goes on in ' +
      "the same message; the lost run's keep-alives and late events make no frame",
    () => {
      const replay = new BackgroundReplay(options);
      const lost = stored('r1', events({ ...start, workerId: 'w1' }, { type: 'text', text: 'Round and ' }));
      const moving = stored(
        'r1',
        events({ type: 'keepalive' }).map((e) => ({ ...e, seq: 3 })),
      );
      const next = stored('r2', events({ ...start, workerId: 'w2' }, { type: 'text', text: 'round.' }, finish('stop')));
      const late = stored(
        'r1',
        events({ type: 'text', text: 'round and ' }).map((e) => ({ ...e, seq: 4 })),
      );
      const frames = [...lost, ...moving, ...next.slice(0, 1), ...late, ...next.slice(1)].flatMap((event) =>
        replay.add(event),
      );
      assert.deepEqual(replay.run, { runId: 'r2', workerId: 'w2' });
      assert.deepEqual(
        frames.map((f) => f.data.sequence_number),
        frames.map((_f, i) => i),
      );
      assert.equal(frames.filter((f) => f.event === 'response.output_item.added').length, 1, 'one message item');
      const resource = replay.resource();
      assert.equal(resource.status, 'completed');
      assert.deepEqual(
        resource.output.map((item) =>
          'content' in item ? (item.content ?? []).map((part) => ('text' in part ? part.text : '')).join('') : '',
        ),
        ['Round and round.'],
      );
    },
  );

  it(
    'responses background replay - what a lost worker sends after its ' +
      "gateway's moving mark, before the next run starts, is left out",
    () => {
      const replay = new BackgroundReplay(options);
      const lost = stored('r1', events({ ...start, workerId: 'w1' }, { type: 'text', text: 'Round and ' }));
      const mark = stored('r1', [{ seq: 0, type: 'keepalive', moving: true }]);
      // A frozen worker wakes, sends what it decoded meanwhile, then hears its cancel: all before the next run's start.
      const woken = stored(
        'r1',
        events({ type: 'text', text: 'round and ' }, finish('cancelled')).map((e, i) => ({ ...e, seq: 2 + i })),
      );
      const next = stored('r2', events({ ...start, workerId: 'w2' }, { type: 'text', text: 'round.' }, finish('stop')));
      const frames = [...lost, ...mark, ...woken, ...next].flatMap((event) => replay.add(event));
      assert.deepEqual(
        frames.map((f) => f.data.sequence_number),
        frames.map((_f, i) => i),
      );
      const resource = replay.resource();
      assert.equal(resource.status, 'completed');
      assert.deepEqual(
        resource.output.map((item) =>
          'content' in item ? (item.content ?? []).map((part) => ('text' in part ? part.text : '')).join('') : '',
        ),
        ['Round and round.'],
      );
    },
  );

  it("responses background replay - a move that fails ends the response with the gateway's error on the marked run", () => {
    const replay = new BackgroundReplay(options);
    const lost = stored('r1', events(start, { type: 'text', text: 'Hi' }));
    const after = stored('r1', [
      { seq: 0, type: 'keepalive', moving: true },
      { seq: 0, type: 'error', error: { code: 'worker_lost', message: 'no worker could take the run' }, moving: true },
    ]);
    const frames = [...lost, ...after].flatMap((event) => replay.add(event));
    assert.equal(frames.at(-1)?.event, 'response.failed');
    assert.equal(replay.resource().status, 'failed');
    // Kept from a gateway that did not mark its error yet: the gateway's events are the ones numbered 0.
    const unmarked = new BackgroundReplay(options);
    const older = stored('r1', [
      { seq: 0, type: 'keepalive', moving: true },
      { seq: 0, type: 'error', error: { code: 'worker_lost', message: 'no worker could take the run' } },
    ]);
    [...lost, ...older].forEach((event) => unmarked.add(event));
    assert.equal(unmarked.resource().status, 'failed');
  });

  it(
    "responses background replay - the lost worker's own error after " +
      'the mark (it woke and shut down) does not end the moved response',
    () => {
      const replay = new BackgroundReplay(options);
      const lost = stored('r1', events({ ...start, workerId: 'w1' }, { type: 'text', text: 'Round and ' }));
      const mark = stored('r1', [{ seq: 0, type: 'keepalive', moving: true }]);
      const woken = stored('r1', [
        {
          seq: 2,
          type: 'error',
          error: { code: 'worker_lost', message: 'worker w1 stopped this background response (shutting down)' },
        },
      ]);
      const next = stored('r2', events({ ...start, workerId: 'w2' }, { type: 'text', text: 'round.' }, finish('stop')));
      const beforeNext = [...lost, ...mark, ...woken].flatMap((event) => replay.add(event));
      assert.equal(
        beforeNext.some((frame) => frame.event === 'response.failed'),
        false,
        'the woken worker ended nothing',
      );
      [...next].forEach((event) => replay.add(event));
      assert.equal(replay.resource().status, 'completed');
    },
  );

  it('responses background replay - a move stopped by a cancel ends the response cancelled', () => {
    const replay = new BackgroundReplay(options);
    const frames = stored(
      'r1',
      events(
        start,
        { type: 'text', text: 'Hi' },
        { type: 'error', error: { code: 'cancelled', message: 'cancelled by POST' } },
      ),
    ).flatMap((event) => replay.add(event));
    const last = frames.at(-1)?.data;
    assert.ok(last && 'response' in last);
    assert.equal(last.response.status, 'cancelled');
    assert.equal(replay.resource().status, 'cancelled');
  });

  it('responses background replay - a failure with no run is failed, not queued', () => {
    const replay = new BackgroundReplay(options);
    replay.fail({ code: 'no_worker', message: 'no worker' });
    assert.equal(replay.resource().status, 'failed');
  });
});
