import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { chooseVictims, type ResidentModel } from './eviction.policy.js';

const MiB = 2 ** 20;
const model = (id: string, over: Partial<ResidentModel> = {}): ResidentModel => ({
  id,
  state: 'ready',
  inFlight: 0,
  queued: 0,
  slots: 1,
  lastUsedAt: 0,
  sizeBytes: MiB,
  pinned: false,
  priority: 0,
  ...over,
});

describe('eviction policy', () => {
  it('eviction policy - nothing goes when the model already fits', () => {
    assert.deepEqual(chooseVictims([model('a')], 2 * MiB, MiB, 'lru', 0), []);
  });

  it('eviction policy - a spare copy goes before a model’s last copy, however recently used; idle before busy still', () => {
    const resident = [
      model('last', { lastUsedAt: 1 }),
      model('spare', { lastUsedAt: 50, spare: true }),
      model('busySpare', { inFlight: 1, spare: true }),
    ];
    assert.deepEqual(
      chooseVictims(resident, 0, MiB, 'lru', 0)?.map((m) => m.id),
      ['spare'],
    );
    assert.deepEqual(
      chooseVictims(resident, 0, 2 * MiB, 'lru', 0)?.map((m) => m.id),
      ['spare', 'last'],
    );
  });

  it('eviction policy - lru evicts the least recently used idle model', () => {
    const victims = chooseVictims(
      [model('a', { lastUsedAt: 30 }), model('b', { lastUsedAt: 10 }), model('c', { lastUsedAt: 20 })],
      0,
      MiB,
      'lru',
      0,
    );
    assert.deepEqual(
      victims?.map((m) => m.id),
      ['b'],
    );
  });

  it('eviction policy - pinned and loading models are never chosen; busy ones only after idle ones', () => {
    const resident = [
      model('pinned', { lastUsedAt: 1, pinned: true }),
      model('busy', { lastUsedAt: 2, inFlight: 1 }),
      model('queued', { lastUsedAt: 3, queued: 2 }),
      model('loading', { lastUsedAt: 4, state: 'loading' }),
      model('idle', { lastUsedAt: 5 }),
    ];
    assert.deepEqual(
      chooseVictims(resident, 0, MiB, 'lru', 0)?.map((m) => m.id),
      ['idle'],
    );
    assert.deepEqual(
      chooseVictims(resident, 0, 3 * MiB, 'lru', 0)?.map((m) => m.id),
      ['idle', 'busy', 'queued'],
    );
    assert.equal(chooseVictims(resident, 0, 4 * MiB, 'lru', 0), null);
  });

  it('eviction policy - priority evicts lower priorities first and never a higher one', () => {
    const resident = [
      model('low-old', { priority: 1, lastUsedAt: 1 }),
      model('high', { priority: 9, lastUsedAt: 0 }),
      model('low-new', { priority: 1, lastUsedAt: 5 }),
    ];
    assert.deepEqual(
      chooseVictims(resident, 0, 2 * MiB, 'priority', 5)?.map((m) => m.id),
      ['low-old', 'low-new'],
    );
    assert.equal(
      chooseVictims(resident, 0, 3 * MiB, 'priority', 5),
      null,
      'the priority-9 model may not be displaced by a priority-5 one',
    );
    assert.deepEqual(
      chooseVictims(resident, 0, 3 * MiB, 'priority', 9)?.map((m) => m.id),
      ['low-old', 'low-new', 'high'],
    );
  });
});
