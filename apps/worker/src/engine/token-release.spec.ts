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

  it("token release - with log-probabilities, each text event carries its own text's tokens: a marker's and the reasoning's none", () => {
    const sent: EngineEvent[] = [];
    const r = new TokenRelease((event) => sent.push(event), undefined, true);
    const entry = (token: string, logprob: number) => ({ token, logprob, bytes: [...Buffer.from(token)], top: [] });
    const token = (id: number, text: string, logprob: number, handle: () => void, hold = 0): void =>
      r.step(id, () => {
        r.sampled(entry(text, logprob));
        r.read(text);
        handle();
        r.hold(hold);
      });
    token(1, 'Let', -0.1, () => r.emit({ type: 'reasoning', text: 'Let' }));
    token(2, '</think>', -0.2, () => undefined);
    token(3, 'Hi', -0.3, () => r.emit({ type: 'text', text: 'Hi' }));
    token(4, ' there <', -0.4, () => r.emit({ type: 'text', text: ' there ' }), 1);
    token(5, 'b', -0.5, () => {
      r.emit({ type: 'text', text: '<b' });
      r.emit({ type: 'keepalive' });
    });
    assert.deepEqual(sent, [
      { type: 'reasoning', text: 'Let', tokens: [1] },
      { type: 'text', text: 'Hi', tokens: [2, 3], logprobs: [entry('Hi', -0.3)] },
      { type: 'text', text: ' there ', tokens: [4], logprobs: [entry(' there ', -0.4)] },
      { type: 'text', text: '<b', tokens: [5], logprobs: [entry('<', -0.4), entry('b', -0.5)] },
      { type: 'keepalive' },
    ]);
  });
});
