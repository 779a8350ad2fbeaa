import type { LoadResult, ModelState, UnloadResult } from '@cortex/contracts';
import type { EngineModel } from './engine/index.js';

/** A model's state on this worker, `absent` when the worker does not hold it at all. */
export type ModelPhase = ModelState | 'absent';

/** What happens to a model: a load starts, ends or fails; an unload starts or ends. */
export type ModelEvent = 'load' | 'loaded' | 'load_failed' | 'unload' | 'unloaded';

interface EntryBase {
  readonly id: string;
  lastUsedAt: number;
  /** Estimated device memory of the model and its context, reserved from the budget while loading. */
  bytes: number;
}

/** A load under way; `cancel_load` aborts it. An unload asked for meanwhile runs once it ends. */
export interface LoadingEntry extends EntryBase {
  readonly state: 'loading';
  readonly loading: Promise<LoadResult>;
  readonly abort: AbortController;
  unloadAfter: Promise<UnloadResult> | null;
}

export interface ReadyEntry extends EntryBase {
  readonly state: 'ready';
  readonly model: EngineModel;
}

/** Its requests finishing (or cancelled), then freed; a second unload command (another router, an admin) joins it. */
export interface UnloadingEntry extends EntryBase {
  readonly state: 'unloading';
  readonly model: EngineModel;
  readonly unloading: Promise<UnloadResult>;
}

/** A model this worker holds, in one of its states (see TRANSITIONS for the moves between them). */
export type ModelEntry = LoadingEntry | ReadyEntry | UnloadingEntry;

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

/** What a load command does (see loadAction), with the entry in the state it was decided on. */
export type LoadAction =
  | { action: 'start' }
  | { action: 'ready'; entry: ReadyEntry }
  | { action: 'join'; entry: LoadingEntry }
  | { action: 'after_unload'; entry: UnloadingEntry };

/**
 * What a load command does, given the model's entry (none while absent): `start` a load; answer at
 * once that it is `ready`; `join` the load under way; or wait for the unload under way to end and
 * then load (`after_unload`: a load started beside it would be removed by that unload's end).
 */
export function loadAction(entry: ModelEntry | undefined): LoadAction {
  switch (entry?.state) {
    case undefined:
      return { action: 'start' };
    case 'ready':
      return { action: 'ready', entry };
    case 'loading':
      return { action: 'join', entry };
    case 'unloading':
      return { action: 'after_unload', entry };
  }
}

/**
 * What an unload command does (see unloadAction), with the entry in the state it was decided on, or
 * the unload to join.
 */
export type UnloadAction =
  | { action: 'not_found' }
  | { action: 'start'; entry: ReadyEntry }
  | { action: 'join'; unloading: Promise<UnloadResult> }
  | { action: 'after_load'; entry: LoadingEntry };

/**
 * What an unload command does, given the model's entry (none while absent) and whether an unload was
 * asked for already: `not_found`; `start` it now; `join` the one asked for; or, while the model
 * loads, unload it once the load has ended (`after_load`).
 */
export function unloadAction(entry: ModelEntry | undefined): UnloadAction {
  switch (entry?.state) {
    case undefined:
      return { action: 'not_found' };
    case 'ready':
      return { action: 'start', entry };
    case 'unloading':
      return { action: 'join', unloading: entry.unloading };
    case 'loading':
      return entry.unloadAfter !== null
        ? { action: 'join', unloading: entry.unloadAfter }
        : { action: 'after_load', entry };
  }
}
