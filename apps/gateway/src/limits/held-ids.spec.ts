import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { HeldIds } from './held-ids.js';

describe('held ids', () => {
  it('held ids - ids are kept per entry and an entry goes with its last id', () => {
    const held = new HeldIds();
    held.add('a', '1');
    held.add('a', '2');
    held.add('b', '3');
    held.delete('a', '1');
    held.delete('b', '3');
    held.delete('c', '4');
    assert.deepEqual(
      [...held].map(([entry, ids]) => [entry, [...ids]]),
      [['a', ['2']]],
    );
  });
});

describe('held ids - renewal', () => {
  it('held ids - renewAll renews each entry with the ids it holds now', async () => {
    const renewed: Array<[string, string[]]> = [];
    const held = new HeldIds(async (entry, ids) => {
      renewed.push([entry, ids]);
    });
    held.add('a', '1');
    held.add('b', '2');
    held.add('b', '3');
    held.delete('a', '1');
    await held.renewAll();
    assert.deepEqual(renewed, [['b', ['2', '3']]]);
  });
});
