import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Heartbeat, LoadedModel } from '@cortex/contracts';
import { CLAIM_MS, FleetState } from './fleet-state.js';

const MiB = 2 ** 20;
const T = 1_000_000;

const model = (id: string, over: Partial<LoadedModel> = {}): LoadedModel => ({
  id,
  state: 'ready',
  inFlight: 0,
  queued: 0,
  slots: 1,
  lastUsedAt: 0,
  sizeBytes: MiB,
  ...over,
});

/** A frozen heartbeat: the state must never write to what a worker reported. */
function beat(models: LoadedModel[], freeMiB = 10, over: Partial<Heartbeat> = {}): Heartbeat {
  const value: Heartbeat = {
    workerId: 'w1',
    host: 'h',
    pid: 1,
    startedAt: 0,
    sentAt: 0,
    intervalMs: 1_000,
    draining: false,
    device: { name: 'cpu', kind: 'cpu', totalBytes: 100 * MiB, freeBytes: 100 * MiB },
    memory: { budgetBytes: 0, usedBytes: 0, freeBytes: freeMiB * MiB },
    models: models.map((m) => Object.freeze(m)),
    ...over,
  };
  Object.freeze(value.memory);
  Object.freeze(value.models);
  return Object.freeze(value);
}

const models = (state: FleetState, now: number): Array<Pick<LoadedModel, 'id' | 'state'>> =>
  state.available(now)[0]?.models.map(({ id, state: s }) => ({ id, state: s })) ?? [];

describe('fleet state', () => {
  it('fleet state - a load claim shows at once, with its memory taken from the worker’s free memory', () => {
    const state = new FleetState();
    state.observe(beat([]), T);
    state.claimModel('w1', model('m', { state: 'loading', sizeBytes: 3 * MiB }), 'm', T);
    assert.deepEqual(models(state, T), [{ id: 'm', state: 'loading' }]);
    assert.equal(state.available(T)[0]?.freeBytes, 7 * MiB);
  });

  it('fleet state - a claim outranks heartbeats until one arrives after its window', () => {
    const state = new FleetState();
    state.observe(beat([]), T);
    state.claimModel('w1', model('m', { state: 'loading' }), 'm', T);
    state.observe(beat([]), T + CLAIM_MS);
    assert.deepEqual(
      models(state, T + CLAIM_MS),
      [{ id: 'm', state: 'loading' }],
      'a heartbeat built before the load still shows it',
    );
    state.observe(beat([]), T + CLAIM_MS + 1);
    assert.deepEqual(models(state, T + CLAIM_MS + 1), [], 'the worker never took it: the claim lapses');
  });

  it('fleet state - a heartbeat that shows the model ready replaces the claim', () => {
    const state = new FleetState();
    state.observe(beat([]), T);
    state.claimModel('w1', model('m', { state: 'loading' }), 'm', T);
    state.observe(beat([model('m', { inFlight: 2 })]), T + 10);
    assert.equal(state.available(T + 10)[0]?.models[0]?.inFlight, 2);
    assert.equal(state.available(T + 10)[0]?.freeBytes, 10 * MiB, 'the worker counts the model itself');
  });

  it('fleet state - a dropped model stays gone while old heartbeats still list it', () => {
    const state = new FleetState();
    state.observe(beat([model('m')]), T);
    state.claimModel('w1', null, 'm', T);
    state.observe(beat([model('m')]), T + 100);
    assert.deepEqual(models(state, T + 100), []);
  });

  it('fleet state - last use only moves forward and never touches the heartbeat', () => {
    const state = new FleetState();
    const first = beat([model('m', { lastUsedAt: 5 })]);
    state.observe(first, T);
    state.touch('w1', 'm', T + 1);
    state.observe(beat([model('m', { lastUsedAt: 7 })]), T + 2);
    assert.equal(state.available(T + 2)[0]?.models[0]?.lastUsedAt, T + 1);
    assert.equal(first.models[0]?.lastUsedAt, 5);
  });

  it('fleet state - a closing claim marks the model until released', () => {
    const state = new FleetState();
    state.observe(beat([model('m')]), T);
    state.claimClosing('w1', 'm', T + 50);
    assert.equal(state.available(T)[0]?.models[0]?.closingUntil, T + 50);
    state.releaseClosing('w1', 'm');
    assert.equal(state.available(T)[0]?.models[0]?.closingUntil, undefined);
  });

  it('fleet state - a silent worker is down and a draining one takes no work', () => {
    const state = new FleetState();
    assert.equal(state.observe(beat([]), T), true, 'first heartbeat: up');
    assert.equal(state.observe(beat([]), T + 500), false);
    assert.equal(state.available(T + 3_501).length, 0);
    assert.deepEqual(
      state.silent(T + 3_501).map((s) => s.workerId),
      ['w1'],
    );
    assert.equal(state.observe(beat([], 10, { draining: true }), T + 4_000), true, 'back after being down');
    assert.equal(state.available(T + 4_000).length, 0);
  });

  it('fleet state - a silent worker is forgotten after the forget window, with its claims; one forgotten comes back as new', () => {
    const state = new FleetState();
    state.observe(beat([model('m')]), T);
    state.claimModel('w1', model('n'), 'n', T);
    assert.deepEqual(state.forgetSilent(T + 5_000, 10_000), [], 'down, not yet forgotten');
    assert.equal(state.all(T + 5_000).length, 1);
    assert.deepEqual(state.forgetSilent(T + 10_000, 10_000), [{ workerId: 'w1', silentMs: 10_000 }]);
    assert.deepEqual(state.all(T + 10_000), []);
    assert.equal(state.lastBeat('w1'), undefined);
    assert.equal(state.observe(beat([]), T + 11_000), true, 'a beat after it brings it back up');
    assert.deepEqual(models(state, T + 11_000), [], 'without the claims it had before');
  });

  it('fleet state - forget (a goodbye) drops a worker at once; forgetting an unknown one says so', () => {
    const state = new FleetState();
    state.observe(beat([model('m')]), T);
    assert.equal(state.forget('w1'), true);
    assert.deepEqual(state.available(T), []);
    assert.equal(state.forget('w1'), false);
  });
});
