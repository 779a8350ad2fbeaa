import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { StreamEventBody, Usage, Timings } from '@cortex/contracts';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { backgroundStop, RunEvents, startSoon } from './run-events.js';

const usage: Usage = { promptTokens: 3, cachedPromptTokens: 0, completionTokens: 2, reasoningTokens: 0 };
const timings: Timings = { ttftMs: 1, promptMs: 1, decodeTokensPerSecond: 10, durationMs: 2, queueMs: 0 };
const cancelled: StreamEventBody = { type: 'finish', reason: 'cancelled', usage, timings };
const stopped: StreamEventBody = { type: 'finish', reason: 'stop', usage, timings };

describe('run events', () => {
  it('run events - backgroundStop: only a background run the worker cancelled itself ends in an error', () => {
    const rows: Array<[string, StreamEventBody, { background: boolean; asked: boolean }, 'as is' | 'error']> = [
      ['a background run cancelled by nobody', cancelled, { background: true, asked: false }, 'error'],
      ['a background run its client cancelled', cancelled, { background: true, asked: true }, 'as is'],
      ['an ordinary run the worker cancelled', cancelled, { background: false, asked: false }, 'as is'],
      ['a background run that finished', stopped, { background: true, asked: false }, 'as is'],
      ["a background run's text", { type: 'text', text: 'x' }, { background: true, asked: false }, 'as is'],
    ];
    for (const [what, event, run, expected] of rows) {
      const out = backgroundStop(event, { ...run, workerId: 'w1', reason: new Error('the model was unloaded') });
      if (expected === 'as is') assert.equal(out, event, what);
      else {
        assert.equal(out.type, 'error', what);
        assert.match(
          out.type === 'error' ? out.error.message : '',
          /worker w1 stopped this background response \(the model was unloaded\); create it again/,
          what,
        );
      }
    }
  });

  it('run events - the start gets the run and worker ids, every sink sees every event in order, nothing follows the end', () => {
    const seen: Array<[string, StreamEventBody]> = [];
    const finished: StreamEventBody[] = [];
    const events = new RunEvents({
      runId: 'r1',
      workerId: 'w1',
      background: false,
      asked: () => false,
      signal: new AbortController().signal,
      sinks: [(event) => seen.push(['trace', event]), (event) => seen.push(['stream', event])],
      finished: (event) => finished.push(event),
    });
    events.emit({ type: 'start', model: 'm', promptTokens: 3 });
    events.emit({ type: 'text', text: 'Hi' });
    events.emit(stopped);
    events.emit({ type: 'text', text: 'late' });
    assert.deepEqual(
      seen.map(([sink, event]) => `${sink}:${event.type}`),
      ['trace:start', 'stream:start', 'trace:text', 'stream:text', 'trace:finish', 'stream:finish'],
    );
    assert.deepEqual(seen[0]?.[1], { type: 'start', model: 'm', promptTokens: 3, runId: 'r1', workerId: 'w1' });
    assert.equal(finished.length, 1);
  });

  it('run events - startSoon: the start goes out on the next turn, or at once before a later event; order kept', async () => {
    const start: StreamEventBody = { type: 'start', model: 'm', promptTokens: 3, runId: 'r1', workerId: 'w1' };
    const text: StreamEventBody = { type: 'text', text: 'x' };
    const alone: StreamEventBody[] = [];
    const sendAlone = startSoon((event) => alone.push(event));
    sendAlone(start);
    assert.deepEqual(alone, [], 'held while the current turn runs');
    await nextTurn();
    assert.deepEqual(alone, [start]);
    sendAlone(text);
    assert.deepEqual(alone, [start, text], 'sent once, never twice');
    const early: StreamEventBody[] = [];
    const sendEarly = startSoon((event) => early.push(event));
    sendEarly(start);
    sendEarly(text);
    sendEarly(stopped);
    assert.deepEqual(early, [start, text, stopped], 'a later event sends the start first');
    await nextTurn();
    assert.deepEqual(early, [start, text, stopped]);
  });
});
