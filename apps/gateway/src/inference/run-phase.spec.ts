import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { nextPhase, streamEnded, type RunPhase, type RunStep } from './run-phase.js';

const PHASES: RunPhase[] = [
  'new',
  'decoded',
  'placing',
  'running',
  'streaming',
  'moving',
  'ended',
  'detached',
  'finished',
];
const STEPS: RunStep[] = [
  'decoded',
  'place',
  'run',
  'first-token',
  'lost',
  'resumed',
  'worker-ended',
  'detach',
  'finish',
];

describe('run phases', () => {
  it('run phase - the lives a run may have, step by step', () => {
    const lives: Array<[string, RunStep[], RunPhase]> = [
      ['a stream to its end', ['decoded', 'place', 'run', 'first-token', 'worker-ended', 'finish'], 'finished'],
      [
        'a worker lost before the first token, placed again',
        ['decoded', 'place', 'run', 'place', 'run', 'first-token'],
        'streaming',
      ],
      [
        'a stream moved to another worker',
        ['decoded', 'place', 'run', 'first-token', 'lost', 'resumed', 'worker-ended'],
        'ended',
      ],
      [
        'a background run left to its worker',
        ['decoded', 'place', 'run', 'first-token', 'detach', 'worker-ended', 'finish'],
        'finished',
      ],
      ['a generate command no worker took: placed again', ['decoded', 'place', 'place', 'run'], 'running'],
      ['an embedding: placed, answered', ['place', 'run', 'worker-ended', 'finish'], 'finished'],
      ['a body that does not decode', ['finish'], 'finished'],
      ['a client gone while a load was waited for', ['decoded', 'place', 'finish'], 'finished'],
      ['a move that found no worker', ['decoded', 'place', 'run', 'first-token', 'lost', 'finish'], 'finished'],
    ];
    for (const [name, steps, end] of lives) {
      let phase: RunPhase = 'new';
      for (const step of steps) {
        const next = nextPhase(phase, step);
        assert.ok(next, `${name}: ${step} in ${phase}`);
        phase = next;
      }
      assert.equal(phase, end, name);
    }
  });

  it('run phase - what may not happen: nothing after finish, no retry after the first token, no move before it', () => {
    const refused: Array<[RunPhase, RunStep]> = [
      ['finished', 'finish'],
      ['finished', 'place'],
      ['streaming', 'place'],
      ['running', 'lost'],
      ['placing', 'first-token'],
      ['new', 'run'],
      ['ended', 'lost'],
      ['detached', 'place'],
      ['moving', 'first-token'],
    ];
    for (const [phase, step] of refused) assert.equal(nextPhase(phase, step), null, `${step} in ${phase}`);
  });

  it('run phase - every phase but finished can finish, and finished is the end', () => {
    for (const phase of PHASES) {
      assert.equal(nextPhase(phase, 'finish'), phase === 'finished' ? null : 'finished', phase);
      if (phase === 'finished') for (const step of STEPS) assert.equal(nextPhase(phase, step), null, step);
    }
  });

  it('run phase - a stream read no more is cancelled on its worker unless it ended on its own; a command on its way counts', () => {
    assert.deepEqual(
      PHASES.filter((phase) => streamEnded(phase)),
      ['ended', 'detached', 'finished'],
    );
    assert.equal(streamEnded('placing'), false, 'a generate command still on its way: the worker may take it');
  });
});
