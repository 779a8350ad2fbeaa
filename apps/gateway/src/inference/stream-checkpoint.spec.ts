import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { StreamEvent } from '@cortex/contracts';
import { StreamCheckpoint } from './stream-checkpoint.js';

const start = (promptTokens: number): StreamEvent => ({
  seq: 0,
  type: 'start',
  runId: 'r',
  workerId: 'w1',
  model: 'm',
  promptTokens,
});

describe('stream checkpoint', () => {
  it('stream checkpoint - collects the token ids of delivered output and the announced tool calls by index', () => {
    const checkpoint = new StreamCheckpoint();
    checkpoint.delivered(start(12));
    checkpoint.delivered({ seq: 1, type: 'reasoning', text: 'hm', tokens: [1, 2] });
    checkpoint.delivered({ seq: 2, type: 'text', text: 'a', tokens: [3] });
    checkpoint.delivered({ seq: 3, type: 'tool_call', index: 0, id: 'call_a', name: 'f' });
    checkpoint.delivered({ seq: 4, type: 'tool_args', index: 0, delta: '{}', tokens: [4, 5] });
    checkpoint.delivered({ seq: 5, type: 'keepalive' });
    assert.deepEqual(checkpoint.resume(), { tokens: [1, 2, 3, 4, 5], toolCallIds: ['call_a'] });
    assert.deepEqual(checkpoint.state, {
      promptTokens: 12,
      deliveredTokens: 5,
      unaccounted: 0,
      migrations: 0,
      refused: null,
      textPieces: 1,
      beyondText: 'reasoning',
    });
  });

  it('stream checkpoint - output without ids is unaccounted until an event with ids completes it', () => {
    const checkpoint = new StreamCheckpoint();
    checkpoint.delivered({ seq: 1, type: 'tool_call', index: 0, id: 'call_a', name: 'f' });
    assert.equal(checkpoint.state.unaccounted, 1);
    checkpoint.delivered({ seq: 2, type: 'text', text: 'x' });
    assert.equal(checkpoint.state.unaccounted, 2);
    checkpoint.delivered({ seq: 3, type: 'tool_args', index: 0, delta: '{', tokens: [9] });
    assert.equal(checkpoint.state.unaccounted, 0);
  });

  it("stream checkpoint - a resumed worker's start keeps the first prompt count; moves and refusals are counted", () => {
    const checkpoint = new StreamCheckpoint();
    checkpoint.delivered(start(12));
    checkpoint.moved();
    assert.equal(checkpoint.moves, 1);
    checkpoint.delivered(start(99));
    checkpoint.refuse('first reason');
    checkpoint.refuse('second reason');
    assert.deepEqual(checkpoint.state, {
      promptTokens: 12,
      deliveredTokens: 0,
      unaccounted: 0,
      migrations: 1,
      refused: 'first reason',
      textPieces: 0,
      beyondText: null,
    });
    assert.equal(checkpoint.moves, 1);
  });

  it('stream checkpoint - the resume is a copy: the checkpoint goes on advancing after it was taken', () => {
    const checkpoint = new StreamCheckpoint();
    checkpoint.delivered({ seq: 1, type: 'text', text: 'a', tokens: [1] });
    const resume = checkpoint.resume();
    checkpoint.delivered({ seq: 2, type: 'text', text: 'b', tokens: [2] });
    assert.deepEqual(resume.tokens, [1]);
    assert.deepEqual(checkpoint.resume().tokens, [1, 2]);
  });

  it('stream checkpoint - a refused stream keeps no token ids: it will never move', () => {
    const checkpoint = new StreamCheckpoint();
    checkpoint.delivered({ seq: 1, type: 'text', text: 'a', tokens: [1] });
    checkpoint.refuse('a request with several choices does not move');
    checkpoint.delivered({ seq: 2, type: 'text', text: 'b', tokens: [2] });
    assert.deepEqual(checkpoint.resume(), { tokens: [], toolCallIds: [] });
    assert.equal(checkpoint.state.refused, 'a request with several choices does not move');
  });

  it("stream checkpoint - a stream without ids keeps the answer's text to go on from, and says what else it holds", () => {
    const checkpoint = new StreamCheckpoint();
    checkpoint.delivered(start(7));
    checkpoint.delivered({ seq: 1, type: 'text', text: 'Round and' });
    checkpoint.delivered({ seq: 2, type: 'keepalive' });
    checkpoint.delivered({ seq: 3, type: 'text', text: ' round ' });
    assert.equal(checkpoint.prefill(), 'Round and round ');
    assert.equal(checkpoint.state.textPieces, 2);
    assert.equal(checkpoint.state.unaccounted, 2);
    assert.equal(checkpoint.state.beyondText, null);
    checkpoint.delivered({ seq: 4, type: 'tool_call', index: 0, id: 'call_a', name: 'f' });
    assert.equal(checkpoint.state.beyondText, 'a tool call');
    checkpoint.refuse('several choices');
    assert.equal(checkpoint.prefill(), '', 'a stream that never moves keeps no text');
  });
});
