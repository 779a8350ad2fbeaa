import { describe, it } from 'node:test';
import assert from 'node:assert/strict';

import { TokenRelease } from './token-release.js';
import type { EngineEvent } from './engine.types.js';

function release(): { sent: EngineEvent[]; replayed: EngineEvent[]; release: TokenRelease } {
  const sent: EngineEvent[] = [];
  const replayed: EngineEvent[] = [];
  return {
    sent,
    replayed,
    release: new TokenRelease(
      (event) => sent.push(event),
      (event) => replayed.push(event),
    ),
  };
}

describe('token release', () => {
  it('token release - each token goes on the event that sends its output', () => {
    const { sent, release: r } = release();
    r.step(7, () => r.emit({ type: 'text', text: 'a' }));
    r.step(8, () => r.emit({ type: 'reasoning', text: 'b' }));
    assert.deepEqual(sent, [
      { type: 'text', text: 'a', tokens: [7] },
      { type: 'reasoning', text: 'b', tokens: [8] },
    ]);
  });

  it('token release - a token whose text is held back waits for the next output, and goes with it', () => {
    const { sent, release: r } = release();
    r.step(1, () => undefined);
    r.step(2, () => undefined);
    assert.deepEqual(sent, []);
    r.step(3, () => r.emit({ type: 'text', text: 'xyz' }));
    assert.deepEqual(sent, [{ type: 'text', text: 'xyz', tokens: [1, 2, 3] }]);
  });

  it('token release - several events of one token: the ids go on the last output, after the others are sent', () => {
    const { sent, release: r } = release();
    r.step(5, () => {
      r.emit({ type: 'text', text: 'held' });
      r.emit({ type: 'tool_call', index: 0, id: 'call_1', name: 'f' });
      r.emit({ type: 'tool_args', index: 0, delta: '{' });
      r.emit({ type: 'keepalive' });
      assert.deepEqual(sent, [], 'nothing goes out before the token is handled');
    });
    assert.deepEqual(sent, [
      { type: 'text', text: 'held' },
      { type: 'tool_call', index: 0, id: 'call_1', name: 'f' },
      { type: 'tool_args', index: 0, delta: '{', tokens: [5] },
      { type: 'keepalive' },
    ]);
  });

  it("token release - a written token (a forced call's marker) goes with the next output; events outside a step go out at once", () => {
    const { sent, release: r } = release();
    r.emit({ type: 'start', model: 'm', promptTokens: 3 });
    r.written(9);
    r.step(4, () => r.emit({ type: 'tool_args', index: 0, delta: '"' }));
    assert.deepEqual(sent, [
      { type: 'start', model: 'm', promptTokens: 3 },
      { type: 'tool_args', index: 0, delta: '"', tokens: [9, 4] },
    ]);
  });

  it('token release - a flush at the end carries the ids still waiting; one with no ids waiting carries none', () => {
    const { sent, release: r } = release();
    r.step(1, () => r.emit({ type: 'text', text: 'a' }));
    r.step(null, () => r.emit({ type: 'text', text: 'rest' }));
    r.step(2, () => undefined);
    r.step(null, () => r.emit({ type: 'text', text: 'tail' }));
    assert.deepEqual(sent, [
      { type: 'text', text: 'a', tokens: [1] },
      { type: 'text', text: 'rest' },
      { type: 'text', text: 'tail', tokens: [2] },
    ]);
  });

  it('token release - while replaying, output goes to the replay sink only and no ids are collected', () => {
    const { sent, replayed, release: r } = release();
    r.replaying = true;
    r.step(1, () => r.emit({ type: 'text', text: 'old' }));
    r.step(2, () => undefined);
    r.replaying = false;
    r.step(3, () => r.emit({ type: 'text', text: 'new' }));
    assert.deepEqual(replayed, [{ type: 'text', text: 'old' }]);
    assert.deepEqual(sent, [{ type: 'text', text: 'new', tokens: [3] }]);
  });

  it('token release - an exception while handling a token still sends what was emitted', () => {
    const { sent, release: r } = release();
    assert.throws(() =>
      r.step(1, () => {
        r.emit({ type: 'text', text: 'a' });
        throw new Error('boom');
      }),
    );
    assert.deepEqual(sent, [{ type: 'text', text: 'a', tokens: [1] }]);
  });
});
