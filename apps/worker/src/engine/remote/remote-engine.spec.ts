import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { afterHeldBack, OutputEstimate } from './remote-engine.js';

describe('remote engine', () => {
  it("remote engine - the white space a prefill could not carry is taken off the answer's first text, once", () => {
    assert.equal(afterHeldBack(' ', ' round we go.'), 'round we go.');
    assert.equal(afterHeldBack('\n\n', '\n'), '', 'a piece of it: the rest is still held');
    assert.equal(afterHeldBack(' ', 'Round'), 'Round', 'an answer that does not repeat it loses nothing');
  });

  it('remote engine - output without reported usage counts a token a piece, or four bytes a token when its deltas are long', () => {
    const few = new OutputEstimate();
    for (const piece of ['a', 'b', '', 'c']) few.add(piece);
    assert.equal(few.tokens, 4, 'a piece each, however short, an empty call name included');
    const long = new OutputEstimate();
    long.add('Round and round we go.'.repeat(10));
    long.add('é'.repeat(10));
    assert.equal(long.tokens, Math.ceil((220 + 20) / 4), 'bytes, not characters');
    assert.equal(new OutputEstimate().tokens, 0);
  });
});
