import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError } from '@cortex/contracts';
import { priorityFor, type Caller } from './priority.decider.js';

const stored = (tier: number): Caller => ({ kind: 'stored', key: { id: 'key_1', account: 'team-a', tier } });

describe('priority decider', () => {
  const cases: { name: string; caller: Caller; header?: string | string[]; tier: number }[] = [
    { name: "a stored key's requests run at its tier", caller: stored(7), tier: 7 },
    { name: 'the header lowers the tier', caller: stored(7), header: '2', tier: 2 },
    { name: 'the header may name the key’s own tier', caller: stored(7), header: ' 7 ', tier: 7 },
    { name: 'a header above the key’s tier is clamped to it', caller: stored(3), header: '9', tier: 3 },
    { name: 'a config-file key runs at the default tier 5', caller: { kind: 'config' }, tier: 5 },
    { name: 'a config-file key may lower it too', caller: { kind: 'config' }, header: '1', tier: 1 },
    { name: 'a config-file key cannot raise it', caller: { kind: 'config' }, header: '8', tier: 5 },
    { name: 'a request without a key is below every tier', caller: { kind: 'none' }, tier: 0 },
    { name: 'and stays there whatever it asks', caller: { kind: 'none' }, header: '9', tier: 0 },
  ];
  for (const { name, caller, header, tier } of cases) {
    it(`priority decider - ${name}`, () => {
      assert.equal(priorityFor(caller, header).tier, tier);
    });
  }

  it('priority decider - a stored key names its account and id; other callers none', () => {
    assert.deepEqual(priorityFor(stored(4), '2'), { tier: 2, account: 'team-a', keyId: 'key_1' });
    assert.deepEqual(priorityFor({ kind: 'config' }, undefined), { tier: 5 });
    assert.deepEqual(priorityFor({ kind: 'none' }, undefined), { tier: 0 });
  });

  for (const header of ['0', '10', '-1', '2.5', 'high', '', '3, 4', ['3', '4']]) {
    it(`priority decider - a header of ${JSON.stringify(header)} is refused, naming the header`, () => {
      assert.throws(
        () => priorityFor(stored(5), header),
        (error: unknown) =>
          error instanceof CortexError &&
          error.code === 'invalid_request' &&
          error.extra.param === 'x-cortex-priority' &&
          /x-cortex-priority header must be a whole number from 1/.test(error.message),
      );
    });
  }
});
