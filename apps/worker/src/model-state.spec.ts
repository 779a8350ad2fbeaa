import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { UnloadResult } from '@cortex/contracts';
import type { EngineModel } from './engine/index.js';
import { SyntheticEngine } from './engine/synthetic-engine.js';
import {
  loadAction,
  nextModelState,
  unloadAction,
  type LoadAction,
  type ModelEntry,
  type ModelEvent,
  type ModelPhase,
  type UnloadAction,
} from './model-state.js';

const PHASES: ModelPhase[] = ['absent', 'loading', 'ready', 'unloading'];
const EVENTS: ModelEvent[] = ['load', 'loaded', 'load_failed', 'unload', 'unloaded'];
/** The unload every entry built here is under way with, or was asked for. */
const UNLOADING: Promise<UnloadResult> = new Promise(() => undefined);

const synthetic = (): Promise<EngineModel> =>
  new SyntheticEngine(1000).load({ id: 'm', path: 'fixture:m', contextSize: 512, slots: 1, maxQueue: 1 });

/** The entry of a model in `phase` (none while absent); a loading one with an unload `asked` for, or not. */
function entryIn(phase: ModelPhase, model: EngineModel, asked = false): ModelEntry | undefined {
  const base = { id: 'm', lastUsedAt: 0, bytes: 0 };
  switch (phase) {
    case 'absent':
      return undefined;
    case 'loading':
      return {
        ...base,
        state: 'loading',
        loading: new Promise(() => undefined),
        abort: new AbortController(),
        unloadAfter: asked ? UNLOADING : null,
      };
    case 'ready':
      return { ...base, state: 'ready', model };
    case 'unloading':
      return { ...base, state: 'unloading', model, unloading: UNLOADING };
  }
}

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

  // Each action carries the entry it was decided on, or the unload to join.
  const loads: Array<[ModelPhase, LoadAction['action']]> = [
    ['absent', 'start'],
    ['ready', 'ready'],
    ['loading', 'join'],
    ['unloading', 'after_unload'],
  ];
  for (const [state, action] of loads) {
    it(`model state - a load command while ${state}: ${action}`, async () => {
      const entry = entryIn(state, await synthetic());
      const decided = loadAction(entry);
      assert.equal(decided.action, action);
      if ('entry' in decided) assert.equal(decided.entry, entry);
    });
  }

  const unloads: Array<[ModelPhase, boolean, UnloadAction['action']]> = [
    ['absent', false, 'not_found'],
    ['ready', false, 'start'],
    ['unloading', true, 'join'],
    ['loading', false, 'after_load'],
    ['loading', true, 'join'],
  ];
  for (const [state, asked, action] of unloads) {
    it(`model state - an unload command while ${state}${asked ? ', one asked already' : ''}: ${action}`, async () => {
      const entry = entryIn(state, await synthetic(), asked);
      const decided = unloadAction(entry);
      assert.equal(decided.action, action);
      if ('entry' in decided) assert.equal(decided.entry, entry);
      if ('unloading' in decided) assert.equal(decided.unloading, UNLOADING);
    });
  }
});
