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

  it('slot pool - a free slot the preference scores highest is taken first', async () => {
    const prefix: Record<string, number> = { a: 3, b: 40, c: 7 };
    const pool = new SlotPool(['a', 'b', 'c'], 0);
    assert.equal(await pool.acquire(undefined, (slot) => prefix[slot] ?? 0), 'b');
    assert.equal(await pool.acquire(undefined, (slot) => prefix[slot] ?? 0), 'c');
    assert.equal(await pool.acquire(), 'a');
    assert.equal(pool.inUse, 3);
  });
});
