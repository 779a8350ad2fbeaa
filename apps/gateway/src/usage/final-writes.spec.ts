import { afterEach, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { FinalWrites } from './final-writes.js';

/** A write NATS refuses `failures` times before it takes it, counting its tries. */
const flaky = (failures: number): { tries: number; write: () => Promise<string> } => {
  const state = {
    tries: 0,
    write: async (): Promise<string> => {
      state.tries++;
      if (state.tries <= failures) throw new Error('timeout');
      return 'written';
    },
  };
  return state;
};

describe('final writes', () => {
  // The retries wait on unref'd timers (a gateway's shutdown must not wait on them); something must keep
  // the test's event loop alive while they run, or a busy runner can find nothing left and end the test.
  let alive: NodeJS.Timeout;
  beforeEach(() => {
    alive = setInterval(() => undefined, 60_000);
  });
  afterEach(() => clearInterval(alive));

  it('final writes - a write NATS does not take is tried again until it does', async () => {
    const writes = new FinalWrites();
    const write = flaky(1);
    assert.equal(await writes.write(write.write), 'written');
    assert.equal(write.tries, 2);
  });

  it("final writes - the gateway's shutdown waits for the request ends still owed, also those that came while it waited", async () => {
    const writes = new FinalWrites();
    const order: string[] = [];
    const first = flaky(1);
    void writes.track(writes.write(first.write).then(() => order.push('first written')));
    const stopping = writes.onApplicationShutdown().then(() => order.push('stopped'));
    // A request's end tracked once the shutdown has begun (its runs reported after the HTTP server closed).
    const late = writes.track(Promise.resolve().then(() => order.push('late written')));
    await Promise.all([stopping, late]);
    assert.deepEqual(order, ['late written', 'first written', 'stopped']);
    assert.equal(first.tries, 2, 'tried again at once when the shutdown began');
  });

  it('final writes - past the shutdown a failing write is not tried again: it rejects with its error', async () => {
    const writes = new FinalWrites();
    await writes.onApplicationShutdown();
    const write = flaky(1);
    await assert.rejects(writes.write(write.write), /timeout/);
    assert.equal(write.tries, 1);
  });
});
