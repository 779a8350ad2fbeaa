import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { chargedTokens, FairQueue, FifoQueue, ticketOf, type QueueTicket, type WaitQueue } from './fair-queue.js';

/** A waiter named `<flow><n>`, at `tier`, costing `cost` tokens. */
interface Entry {
  name: string;
  tier: number;
  cost: number;
}

const parse = (spec: string): Entry => {
  const [name, tier, cost] = spec.split('/');
  return { name: name as string, tier: Number(tier ?? 5), cost: Number(cost ?? 10) };
};
const toTicket = (entry: Entry): QueueTicket => ({
  tier: entry.tier,
  flow: entry.name.replace(/\d+$/, ''),
  cost: entry.cost,
});

/** Pushes every waiter, then admits them all: the order they come out in. */
function drain(queue: WaitQueue<Entry>, specs: string[]): string[] {
  for (const entry of specs.map(parse)) queue.push(entry, toTicket(entry));
  const order: string[] = [];
  for (let next = queue.shift(); next; next = queue.shift()) order.push(next.name);
  assert.equal(queue.size, 0);
  return order;
}

describe('fair queue', () => {
  // Waiters are `<flow><n>/<tier>/<cost>` (tier 5 and cost 10 when left out); quantum 10 unless said.
  const cases: { name: string; queued: string[]; expected: string[]; quantum?: number }[] = [
    { name: 'one flow is first come first served', queued: ['a1', 'a2', 'a3'], expected: ['a1', 'a2', 'a3'] },
    {
      name: 'a higher tier goes first, whatever came before it',
      queued: ['a1/3', 'b1/3', 'c1/7', 'a2/3', 'c2/9'],
      expected: ['c2', 'c1', 'a1', 'b1', 'a2'],
    },
    {
      name: 'requests without a key (tier 0) come after every keyed tier',
      queued: ['u1/0', 'a1/1', 'u2/0'],
      expected: ['a1', 'u1', 'u2'],
    },
    {
      name: 'two accounts of one tier alternate, not first come first served',
      queued: ['a1', 'a2', 'a3', 'a4', 'b1', 'b2'],
      expected: ['a1', 'b1', 'a2', 'b2', 'a3', 'a4'],
    },
    {
      name: 'three accounts take turns in the order they started waiting',
      queued: ['a1', 'a2', 'b1', 'b2', 'c1', 'c2'],
      expected: ['a1', 'b1', 'c1', 'a2', 'b2', 'c2'],
    },
    {
      name: 'accounts are charged in tokens: an account with requests three times as long is admitted a third as often',
      queued: ['a1/5/30', 'a2/5/30', 'a3/5/30', 'b1', 'b2', 'b3', 'b4', 'b5', 'b6', 'b7'],
      expected: ['b1', 'b2', 'a1', 'b3', 'b4', 'b5', 'a2', 'b6', 'b7', 'a3'],
    },
    {
      name: 'a large quantum lets an account in for a burst of requests',
      queued: ['a1', 'a2', 'a3', 'b1', 'b2'],
      expected: ['a1', 'a2', 'a3', 'b1', 'b2'],
      quantum: 30,
    },
    {
      name: 'a request far over the quantum is admitted after the rounds it needs, skipped in one step',
      queued: ['a1/5/100000', 'b1/5/60000', 'b2/5/60000'],
      expected: ['b1', 'a1', 'b2'],
      quantum: 1,
    },
  ];
  for (const { name, queued, expected, quantum } of cases) {
    it(`fair queue - ${name}`, () => {
      assert.deepEqual(drain(new FairQueue(quantum ?? 10), queued), expected);
    });
  }

  it('fair queue - first come first served (fifo) ignores tiers and accounts', () => {
    assert.deepEqual(drain(new FifoQueue(), ['a1/3', 'a2/3', 'b1/9', 'u1/0']), ['a1', 'a2', 'b1', 'u1']);
  });

  it('fair queue - an account that owes for a long generation waits behind one that owes nothing', () => {
    const queue = new FairQueue<Entry>(20);
    // a1 ran at once (charged its estimate of 10) and turned out to cost 500 tokens.
    const a1 = { tier: 5, flow: 'a', cost: 10 };
    queue.admitted(a1);
    for (const spec of ['a2', 'a3', 'b1']) queue.push(parse(spec), toTicket(parse(spec)));
    queue.settle(a1, 500);
    const order = [queue.shift(), queue.shift(), queue.shift()].map((entry) => entry?.name);
    assert.deepEqual(order, ['b1', 'a2', 'a3']);
    // Without the correction (a1 cost what it was charged), a was first in the round and goes first.
    const fresh = new FairQueue<Entry>(20);
    fresh.admitted(a1);
    for (const spec of ['a2', 'a3', 'b1']) fresh.push(parse(spec), toTicket(parse(spec)));
    fresh.settle(a1, 10);
    assert.equal(fresh.shift()?.name, 'a2');
  });

  it('fair queue - an account that always has a request running pays down its debt in the rounds it sits out', () => {
    const queue = new FairQueue<Entry>(10);
    const [b0, b1] = [
      { tier: 5, flow: 'b', cost: 10 },
      { tier: 5, flow: 'b', cost: 10 },
    ];
    queue.admitted(b0);
    queue.admitted(b1);
    for (let i = 1; i <= 12; i++) queue.push(parse(`a${i}`), toTicket(parse(`a${i}`)));
    const order = [1, 2, 3, 4, 5].map(() => queue.shift()?.name);
    // b1 turns out to cost 50 while a is admitted for four more rounds: b owes 60 (both estimates and b1's 40 over its
    // own), less 40, when it waits again.
    queue.settle(b1, 50);
    queue.push(parse('b2'), toTicket(parse('b2')));
    assert.equal(queue.describe().find((flow) => flow.flow === 'b')?.deficit, -20);
    for (let i = 0; i < 4; i++) order.push(queue.shift()?.name);
    // Without the rounds it sat out, b would wait for a6 to a12 (seven quanta).
    assert.deepEqual(order, ['a1', 'a2', 'a3', 'a4', 'a5', 'a6', 'a7', 'b2', 'a8']);
  });

  it('fair queue - unused credit is not banked: an account that stopped waiting starts its next wait at zero', () => {
    const queue = new FairQueue<Entry>(100);
    queue.push(parse('a1'), toTicket(parse('a1')));
    assert.equal(queue.shift()?.name, 'a1');
    // a1 left 90 tokens of the quantum unused; a has nothing waiting, so they are dropped.
    assert.deepEqual(queue.describe(), [{ tier: 5, flow: 'a', waiting: 0, deficit: 0, running: 1 }]);
    queue.settle({ tier: 5, flow: 'a', cost: 10 }, 10);
    assert.deepEqual(queue.describe(), [], 'a flow with nothing waiting or running is forgotten');
  });

  it('fair queue - a debt is kept while the account still runs a request, and dropped once nothing of it runs', () => {
    const queue = new FairQueue<Entry>(10);
    const [first, second] = [
      { tier: 5, flow: 'a', cost: 10 },
      { tier: 5, flow: 'a', cost: 10 },
    ];
    queue.admitted(first);
    queue.admitted(second);
    queue.settle(first, 210);
    assert.deepEqual(queue.describe(), [{ tier: 5, flow: 'a', waiting: 0, deficit: -220, running: 1 }]);
    queue.settle(second, 10);
    assert.deepEqual(queue.describe(), []);
  });

  it('fair queue - a waiter that gives up leaves the round without disturbing its order', () => {
    const queue = new FairQueue<Entry>(10);
    const entries = ['a1', 'b1', 'c1', 'a2', 'b2', 'c2'].map(parse);
    for (const entry of entries) queue.push(entry, toTicket(entry));
    assert.equal(queue.shift()?.name, 'a1');
    // b's only waiter in this round and c's first go; the round continues with the flows still waiting.
    assert.equal(queue.remove(entries[1] as Entry), true);
    assert.equal(queue.remove(entries[1] as Entry), false);
    assert.equal(queue.remove(entries[2] as Entry), true);
    assert.equal(queue.size, 3);
    const order: string[] = [];
    for (let next = queue.shift(); next; next = queue.shift()) order.push(next.name);
    assert.deepEqual(order, ['b2', 'c2', 'a2']);
  });

  it('fair queue - while two accounts wait, their admitted tokens never differ by more than one request and one quantum', () => {
    const quantum = 16;
    const queue = new FairQueue<Entry>(quantum);
    // a: short requests, b: long ones, c: mixed; all waiting at once.
    const costs: Record<string, number[]> = {
      a: [5, 7, 6, 5, 8, 6, 7, 5, 6, 7, 5, 6],
      b: [40, 35, 50, 45],
      c: [20, 3, 30, 4, 25, 2],
    };
    for (const [flow, list] of Object.entries(costs))
      list.forEach((cost, i) => queue.push({ name: `${flow}${i}`, tier: 5, cost }, { tier: 5, flow, cost }));
    const admitted: Record<string, number> = { a: 0, b: 0, c: 0 };
    const left: Record<string, number> = { a: 12, b: 4, c: 6 };
    for (let next = queue.shift(); next; next = queue.shift()) {
      const flow = next.name[0] as string;
      admitted[flow]! += next.cost;
      left[flow]!--;
      const waiting = Object.keys(left).filter((f) => left[f]! > 0);
      for (const x of waiting)
        for (const y of waiting)
          assert.ok(
            admitted[x]! - admitted[y]! <= 50 + quantum,
            `${x} ${admitted[x]} vs ${y} ${admitted[y]} after ${next.name}`,
          );
    }
  });

  it('fair queue - a quantum that is not positive is refused', () => {
    assert.throws(() => new FairQueue(0), /quantum must be positive/);
  });

  it('fair queue - a request is charged its uncached prompt tokens plus its output', () => {
    assert.equal(chargedTokens({ promptTokens: 120, cachedPromptTokens: 100, completionTokens: 30 }), 50);
    assert.equal(chargedTokens({ promptTokens: 10, cachedPromptTokens: 10, completionTokens: 0 }), 0);
    assert.equal(chargedTokens({ promptTokens: 50, cachedPromptTokens: 20, completionTokens: 9 }), 39);
  });
});

describe('fair queue tickets', () => {
  it('fair queue - a command without priority waits at the lowest tier in the shared flow; with one, at its tier and account', () => {
    assert.deepEqual(ticketOf(undefined, 12), { tier: 0, flow: '', cost: 12 });
    assert.deepEqual(ticketOf({ tier: 7, account: 'team-a', keyId: 'key_1' }, 40), {
      tier: 7,
      flow: 'team-a',
      cost: 40,
    });
  });
});
