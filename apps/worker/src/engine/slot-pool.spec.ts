import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError } from '@cortex/contracts';
import { SlotPool } from './slot-pool.js';

describe('slot pool', () => {
  it('slot pool - queues past the free slots and hands a released slot to the first waiter', async () => {
    const pool = new SlotPool(['a'], 2);
    const first = await pool.acquire();
    const order: string[] = [];
    const second = pool.acquire().then((slot) => order.push(`second:${slot}`));
    const third = pool.acquire().then((slot) => order.push(`third:${slot}`));
    assert.equal(pool.queued, 2);
    pool.release(first);
    await second;
    pool.release('a');
    await third;
    assert.deepEqual(order, ['second:a', 'third:a']);
    assert.equal(pool.inUse, 1);
  });

  it('slot pool - answers busy when the queue is full', async () => {
    const pool = new SlotPool(['a'], 0);
    await pool.acquire();
    await assert.rejects(pool.acquire(), (error: Error) => error instanceof CortexError && error.code === 'busy');
  });

  it('slot pool - an aborted waiter leaves the queue', async () => {
    const pool = new SlotPool(['a'], 4);
    await pool.acquire();
    const controller = new AbortController();
    const waiting = pool.acquire(controller.signal);
    controller.abort(new Error('client gone'));
    await assert.rejects(waiting, /client gone/);
    assert.equal(pool.queued, 0);
  });

  it('slot pool - the free slot the choice picks is taken; without one, the most recently released', async () => {
    const pool = new SlotPool(['a', 'b', 'c'], 0);
    const seen: string[][] = [];
    assert.equal(await pool.acquire(undefined, (free) => (seen.push([...free]), free.indexOf('b'))), 'b');
    assert.deepEqual(seen, [['a', 'b', 'c']], 'the choice sees every free slot');
    assert.equal(await pool.acquire(), 'c');
    assert.equal(await pool.acquire(undefined, () => 0), 'a', 'one free slot is taken without asking');
    assert.equal(pool.inUse, 3);
  });

  it('slot pool - a released slot goes to the highest tier waiting, then across accounts; fifo keeps arrival order', async () => {
    for (const [order, expected] of [
      ['fair', ['c', 'b', 'a1', 'a2']],
      ['fifo', ['a1', 'a2', 'b', 'c']],
    ] as const) {
      const pool = new SlotPool(['s'], 8, order);
      await pool.acquire(undefined, undefined, { tier: 5, flow: 'a', cost: 10 });
      const admitted: string[] = [];
      const waits = [
        ['a1', { tier: 5, flow: 'a', cost: 10 }],
        ['a2', { tier: 5, flow: 'a', cost: 10 }],
        ['b', { tier: 5, flow: 'b', cost: 10 }],
        ['c', { tier: 7, flow: 'c', cost: 10 }],
      ] as const;
      for (const [name, ticket] of waits)
        void pool.acquire(undefined, undefined, ticket).then(() => admitted.push(name));
      // Each admitted request runs and ends, costing 200 tokens (a's first one included).
      for (let i = 0; i < waits.length; i++) {
        pool.release('s', 200);
        await new Promise((tick) => setImmediate(tick));
      }
      assert.deepEqual(admitted, expected, order);
      pool.release('s', 200);
      assert.equal(pool.inUse, 0);
    }
  });
});
