import type { ModelState } from '@cortex/contracts';

/** A model's state on this worker, `absent` when the worker does not hold it at all. */
export type ModelPhase = ModelState | 'absent';

/** What happens to a model: a load starts, ends or fails; an unload starts or ends. */
export type ModelEvent = 'load' | 'loaded' | 'load_failed' | 'unload' | 'unloaded';

/**
 * A model's life on a worker: absent → loading → ready → unloading → absent, and a load that fails
 * (or is cancelled) goes straight back to absent. Every other event in a state is a bug.
 */
const TRANSITIONS: Readonly<Record<ModelPhase, Partial<Record<ModelEvent, ModelPhase>>>> = {
  absent: { load: 'loading' },
  loading: { loaded: 'ready', load_failed: 'absent' },
  ready: { unload: 'unloading' },
  unloading: { unloaded: 'absent' },
};

/** The state `event` leads to from `from`, or null when it cannot happen there. */
export function nextModelState(from: ModelPhase, event: ModelEvent): ModelPhase | null {
  return TRANSITIONS[from][event] ?? null;
}

/**
 * What a load command does, given the model's state: `start` a load; answer at once that it is
 * `ready`; `join` the load under way; or wait for the unload under way to end and then load
 * (`after_unload`: a load started beside it would be removed by that unload's end).
 */
export function loadAction(state: ModelPhase): 'start' | 'ready' | 'join' | 'after_unload' {
  switch (state) {
    case 'absent':
      return 'start';
    case 'ready':
      return 'ready';
    case 'loading':
      return 'join';
    case 'unloading':
      return 'after_unload';
  }
}

/**
 * What an unload command does, given the model's state and whether an unload was asked for already:
 * `not_found`; `start` it now; `join` the one asked for; or, while the model loads, unload it once
 * the load has ended (`after_load`).
 */
export function unloadAction(state: ModelPhase, asked: boolean): 'not_found' | 'start' | 'join' | 'after_load' {
  switch (state) {
    case 'absent':
      return 'not_found';
    case 'ready':
      return 'start';
    case 'unloading':
      return 'join';
    case 'loading':
      return asked ? 'join' : 'after_load';
  }
}
