import 'reflect-metadata';
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { workerPresence, type WorkerPresence } from './fleet.messages.js';

describe('worker presence', () => {
  const FORGET = 600_000;
  const cases: Array<
    [
      what: string,
      beat: { intervalMs: number; leaving?: boolean },
      silentMs: number,
      forgetMs: number,
      expected: WorkerPresence,
    ]
  > = [
    ['a fresh beat is up', { intervalMs: 1_000 }, 0, FORGET, 'up'],
    ['three intervals of silence is still up', { intervalMs: 1_000 }, 3_000, FORGET, 'up'],
    ['past three intervals it is down', { intervalMs: 1_000 }, 3_001, FORGET, 'down'],
    ['never down before 2 s, however fast it beats', { intervalMs: 100 }, 1_999, FORGET, 'up'],
    ['down until the forget window is over', { intervalMs: 1_000 }, FORGET - 1, FORGET, 'down'],
    ['forgotten once it is', { intervalMs: 1_000 }, FORGET, FORGET, 'forgotten'],
    ['a short window forgets nothing before it is down', { intervalMs: 1_000 }, 2_500, 2_000, 'up'],
    ['a short window forgets once down', { intervalMs: 1_000 }, 3_001, 2_000, 'forgotten'],
    ['a goodbye is left at once', { intervalMs: 1_000, leaving: true }, 0, FORGET, 'left'],
    ['and stays left however long ago', { intervalMs: 1_000, leaving: true }, FORGET * 2, FORGET, 'left'],
    ['leaving: false is an ordinary beat', { intervalMs: 1_000, leaving: false }, 0, FORGET, 'up'],
  ];
  for (const [what, beat, silentMs, forgetMs, expected] of cases)
    it(`worker presence - ${what}`, () => {
      assert.equal(workerPresence(beat, silentMs, forgetMs), expected);
    });
});
