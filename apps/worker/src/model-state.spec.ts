import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { loadAction, nextModelState, unloadAction, type ModelEvent, type ModelPhase } from './model-state.js';

const PHASES: ModelPhase[] = ['absent', 'loading', 'ready', 'unloading'];
const EVENTS: ModelEvent[] = ['load', 'loaded', 'load_failed', 'unload', 'unloaded'];

describe('model state', () => {
  // Every state × event: the five allowed transitions, and null (a bug) for each of the other fifteen.
  const allowed: Record<string, ModelPhase> = {
    'absent load': 'loading',
    'loading loaded': 'ready',
    'loading load_failed': 'absent',
    'ready unload': 'unloading',
    'unloading unloaded': 'absent',
  };
  for (const from of PHASES) {
    for (const event of EVENTS) {
      const expected = allowed[`${from} ${event}`] ?? null;
      it(`model state - ${from} + ${event} → ${expected ?? 'not allowed'}`, () =>
        assert.equal(nextModelState(from, event), expected));
    }
  }

  const loads: Array<[ModelPhase, ReturnType<typeof loadAction>]> = [
    ['absent', 'start'],
    ['ready', 'ready'],
    ['loading', 'join'],
    ['unloading', 'after_unload'],
  ];
  for (const [state, action] of loads) {
    it(`model state - a load command while ${state}: ${action}`, () => assert.equal(loadAction(state), action));
  }

  const unloads: Array<[ModelPhase, boolean, ReturnType<typeof unloadAction>]> = [
    ['absent', false, 'not_found'],
    ['ready', false, 'start'],
    ['unloading', true, 'join'],
    ['loading', false, 'after_load'],
    ['loading', true, 'join'],
  ];
  for (const [state, asked, action] of unloads) {
    it(`model state - an unload command while ${state}${asked ? ', one asked already' : ''}: ${action}`, () =>
      assert.equal(unloadAction(state, asked), action));
  }
});
