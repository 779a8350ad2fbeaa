import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { TokenPrice } from '@cortex/contracts';
import { formatMoney, moneyReservation } from './money.decider.js';

describe('money decider', () => {
  // Prices per million tokens; a price of 1 is 1,000 billionths a token.
  const reservations: Array<[string, { prompt: number; output: number }, TokenPrice | undefined, number | null]> = [
    ['prompt and output at their prices', { prompt: 100, output: 20 }, { input: 2, output: 10 }, 400_000],
    [
      'the prompt at the cached price when that is the dearer',
      { prompt: 100, output: 0 },
      { input: 1, cachedInput: 3, output: 10 },
      300_000,
    ],
    [
      'a cheaper cached price does not lower the bound',
      { prompt: 100, output: 0 },
      { input: 3, cachedInput: 0.3, output: 10 },
      300_000,
    ],
    ['a fraction of a billionth is rounded up', { prompt: 1, output: 0 }, { input: 0.0001, output: 0 }, 1],
    ['a free model reserves nothing', { prompt: 100, output: 20 }, { input: 0, output: 0 }, 0],
    ['embeddings: no output', { prompt: 40, output: 0 }, { input: 0.02, output: 0 }, 800],
    ['no price: no bound', { prompt: 100, output: 20 }, undefined, null],
  ];
  for (const [what, bound, price, expected] of reservations) {
    it(`money - reservation: ${what}`, () => assert.equal(moneyReservation(bound, price), expected));
  }

  const amounts: Array<[number, string]> = [
    [0, '0.00'],
    [50_000_000_000, '50.00'],
    [250_000_000, '0.25'],
    [1_111_110, '0.00111111'],
    [12_345, '0.000012345'],
    [1, '0.000000001'],
    [9_000_000_000_000_000, '9000000.00'],
  ];
  for (const [billionths, shown] of amounts) {
    it(`money - ${billionths} billionths read ${shown}`, () => assert.equal(formatMoney(billionths), shown));
  }
});
