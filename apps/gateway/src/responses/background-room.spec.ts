import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { backgroundRefusal } from './background-room.js';

const MIB = 2 ** 20;

describe('background room', () => {
  it("background room - a new background response is refused from 90 % of the stream's limit, naming it and what to do", () => {
    const cases: Array<[string, { bytes: number; maxBytes: number }, boolean]> = [
      ['empty', { bytes: 0, maxBytes: 512 * MIB }, false],
      ['just under 90 %', { bytes: 0.9 * 512 * MIB - 1, maxBytes: 512 * MIB }, false],
      ['at 90 %', { bytes: 0.9 * 512 * MIB, maxBytes: 512 * MIB }, true],
      ['full', { bytes: 4 * MIB, maxBytes: 4 * MIB }, true],
      ['no limit', { bytes: 10_000 * MIB, maxBytes: -1 }, false],
    ];
    for (const [name, room, refused] of cases) assert.equal(backgroundRefusal(room) !== null, refused, name);
    const refusal = backgroundRefusal({ bytes: 4 * MIB, maxBytes: 4 * MIB });
    assert.equal(refusal?.status, 503);
    assert.equal(refusal?.toBody().retryAfter, 60);
    assert.match(
      refusal?.message ?? '',
      /the stream CORTEX_BACKGROUND, which keeps their events, holds 4 MiB of 4 MiB \(responses\.background_max_bytes\)/,
    );
    assert.match(refusal?.message ?? '', /nats stream purge CORTEX_BACKGROUND/);
  });
});
