import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { afterHeldBack } from './remote-engine.js';

describe('remote engine', () => {
  it("remote engine - the white space a prefill could not carry is taken off the answer's first text, once", () => {
    assert.equal(afterHeldBack(' ', ' round we go.'), 'round we go.');
    assert.equal(afterHeldBack('\n\n', '\n'), '', 'a piece of it: the rest is still held');
    assert.equal(afterHeldBack(' ', 'Round'), 'Round', 'an answer that does not repeat it loses nothing');
  });
});
