import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { NO_USAGE, type Usage } from '@cortex/contracts';
import { RequestMeter } from './request-meter.js';

const used = (promptTokens: number, completionTokens: number): Usage => ({
  ...NO_USAGE,
  promptTokens,
  completionTokens,
});

/** Whether the meter settled by now, and with what. */
async function state(meter: RequestMeter): Promise<number | 'open'> {
  return Promise.race([meter.settled, new Promise<'open'>((done) => setImmediate(() => done('open')))]);
}

describe('request meter', () => {
  const cases: Array<{ name: string; steps: (meter: RequestMeter) => void; expected: number | 'open' }> = [
    {
      name: 'one run reports, then the response closes',
      steps: (m) => (m.opened()(used(10, 5)), m.close()),
      expected: 15,
    },
    {
      name: 'the response closes first (a cancelled stream), then its run reports',
      steps: (m) => {
        const report = m.opened();
        m.close();
        report(used(10, 3));
      },
      expected: 13,
    },
    { name: 'closed, and a run has not reported yet', steps: (m) => (m.opened(), m.close()), expected: 'open' },
    {
      name: 'every run of a fan-out reports',
      steps: (m) => {
        const a = m.opened();
        const b = m.opened();
        a(used(4, 4));
        m.close();
        b(used(4, 6));
      },
      expected: 18,
    },
    { name: 'a run that failed reports nothing used', steps: (m) => (m.opened()(null), m.close()), expected: 0 },
    {
      name: 'a run that reports twice counts once',
      steps: (m) => {
        const report = m.opened();
        report(used(1, 1));
        report(used(1, 1));
        m.close();
      },
      expected: 2,
    },
    {
      name: 'a request closed before any run (refused at decode) settles with nothing',
      steps: (m) => m.close(),
      expected: 0,
    },
    { name: 'runs reported but the response is still open', steps: (m) => m.opened()(used(2, 2)), expected: 'open' },
  ];
  for (const { name, steps, expected } of cases) {
    it(`request meter - ${name}`, async () => {
      const meter = new RequestMeter();
      steps(meter);
      assert.equal(await state(meter), expected);
    });
  }

  it('request meter - the admission bills it to a key, and what was reported so far is readable before it settles', () => {
    const meter = new RequestMeter();
    assert.equal(meter.payer, null);
    meter.bill({ account: 'team-a', keyId: 'key_1' });
    meter.opened()(used(7, 0));
    meter.opened();
    assert.deepEqual(meter.payer, { account: 'team-a', keyId: 'key_1' });
    assert.equal(meter.reported, 7);
  });
});
