import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CallSlots, MAX_WAITING_CALLS } from './call-slots.js';

const never = new AbortController().signal;

describe('call slots', () => {
  it('call slots - at most the limit run; the rest wait in order and go in as slots come back, each given back once', async () => {
    const slots = new CallSlots(2);
    const first = await slots.acquire(never);
    const second = await slots.acquire(never);
    const order: number[] = [];
    const third = slots.acquire(never).then((release) => (order.push(3), release));
    const fourth = slots.acquire(never).then((release) => (order.push(4), release));
    assert.deepEqual([slots.running, slots.queued], [2, 2]);
    first!();
    first!();
    await third;
    assert.deepEqual([slots.running, slots.queued, order], [2, 1, [3]], 'a slot given back twice counts once');
    second!();
    (await fourth)!();
    assert.deepEqual(order, [3, 4]);
    assert.equal(slots.running, 1);
  });

  it('call slots - a waiter whose signal ends leaves the queue; past MAX_WAITING_CALLS a call gets no slot at all', async () => {
    const slots = new CallSlots(1);
    const held = await slots.acquire(never);
    const gone = new AbortController();
    const waiting = slots.acquire(gone.signal);
    gone.abort(new Error('the call timed out'));
    await assert.rejects(waiting, /the call timed out/);
    assert.equal(slots.queued, 0);
    const queue = Array.from({ length: MAX_WAITING_CALLS }, () => slots.acquire(never));
    assert.equal(await slots.acquire(never), null);
    held!();
    (await queue[0])!();
    assert.equal(slots.queued, MAX_WAITING_CALLS - 2);
    assert.throws(() => slots.acquire(gone.signal), /the call timed out/, 'an ended signal gets no slot');
  });
});
