import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { chooseSlot, longestPrefix, type SlotView } from './slot-choice.decider.js';

const slot = (held: number, shared: number, lastUsed: number): SlotView => ({ held, shared, lastUsed });

describe('slot choice decider', () => {
  const cases: Array<{ name: string; free: SlotView[]; pick: number; before: number }> = [
    {
      name: "a second conversation takes the empty slot, not the first one's (they share only the template header)",
      free: [slot(800, 9, 10), slot(0, 0, 0)],
      pick: 1,
      before: 0,
    },
    { name: 'a follow-up finds its own history', free: [slot(800, 9, 10), slot(900, 900, 5)], pick: 1, before: 1 },
    {
      name: 'a follow-up finds its history among several, the longest real share wins',
      free: [slot(500, 300, 1), slot(900, 850, 2), slot(100, 0, 3)],
      pick: 1,
      before: 1,
    },
    {
      name: 'an edited last turn reuses most of its history (the prompt ends before the sequence does)',
      free: [slot(1000, 700, 4), slot(0, 0, 0)],
      pick: 0,
      before: 0,
    },
    {
      name: 'half of what a sequence holds is not enough: the slot with less to lose goes',
      free: [slot(1000, 500, 9), slot(600, 9, 2)],
      pick: 1,
      before: 0,
    },
    {
      name: 'no share: the least recently used goes',
      free: [slot(700, 9, 30), slot(900, 9, 10), slot(800, 9, 20)],
      pick: 1,
      before: 2,
    },
    {
      name: 'no share, used at the same time: the one holding less goes',
      free: [slot(700, 0, 10), slot(300, 0, 10)],
      pick: 1,
      before: 1,
    },
    {
      name: 'an empty slot goes before any held one, however old',
      free: [slot(50, 0, 1), slot(0, 0, 99)],
      pick: 1,
      before: 1,
    },
    { name: 'every slot empty: the most recently released', free: [slot(0, 0, 0), slot(0, 0, 0)], pick: 1, before: 1 },
    { name: 'one free slot', free: [slot(400, 3, 7)], pick: 0, before: 0 },
  ];
  for (const { name, free, pick, before } of cases) {
    it(`slot choice - ${name}`, () => {
      assert.equal(chooseSlot(free), pick);
      assert.equal(longestPrefix(free), before, 'the rule before (longest shared prefix)');
    });
  }
});
