import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError } from '@cortex/contracts';
import { ToolCallLedger } from './tool-results.js';

type Step = ['call', string] | ['result', string];

describe('tool results', () => {
  const cases: Array<{ name: string; steps: Step[]; orphan?: string }> = [
    {
      name: 'a result after its call',
      steps: [
        ['call', 'c1'],
        ['result', 'c1'],
      ],
    },
    {
      name: 'parallel calls answered in any order',
      steps: [
        ['call', 'a'],
        ['call', 'b'],
        ['result', 'b'],
        ['result', 'a'],
      ],
    },
    {
      name: 'a call answered twice (a retried tool)',
      steps: [
        ['call', 'a'],
        ['result', 'a'],
        ['result', 'a'],
      ],
    },
    { name: 'a result with no call at all', steps: [['result', 'call_missing']], orphan: 'call_missing' },
    {
      name: 'a result before its call',
      steps: [
        ['result', 'c1'],
        ['call', 'c1'],
      ],
      orphan: 'c1',
    },
    {
      name: 'a result for another id',
      steps: [
        ['call', 'c1'],
        ['result', 'c2'],
      ],
      orphan: 'c2',
    },
  ];
  for (const { name, steps, orphan } of cases) {
    it(`tool results - ${name}`, () => {
      const ledger = new ToolCallLedger();
      const run = () =>
        steps.forEach(([kind, id], i) =>
          kind === 'call' ? ledger.called(id) : ledger.answered(id, `messages[${i}].tool_call_id`),
        );
      if (orphan === undefined) return assert.doesNotThrow(run);
      assert.throws(run, (error: unknown) => {
        assert.ok(error instanceof CortexError);
        assert.equal(error.code, 'invalid_request');
        assert.match(error.message, new RegExp(`'${orphan}'`));
        assert.match(String(error.extra.param), /^messages\[\d\]\.tool_call_id$/);
        return true;
      });
    });
  }
});
