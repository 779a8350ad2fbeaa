import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { CanonicalRequest } from './canonical-request.js';
import { drawSeed, MAX_DRAWN_SEED, seedFor, withSeed } from './seed.js';

describe('seed', () => {
  const drawn = (): number => 4242;
  const cases: Array<[what: string, seed: number | undefined, expected: number]> = [
    ['a request without a seed gets a drawn one', undefined, 4242],
    ["a request's own seed is kept", 7, 7],
    ['seed 0 is a seed, not "none"', 0, 0],
    ['a negative seed is kept as the client sent it', -5, -5],
  ];
  for (const [what, seed, expected] of cases)
    it(`seed - ${what}`, () => {
      assert.equal(seedFor(seed === undefined ? {} : { seed }, drawn), expected);
    });

  it('seed - withSeed sets the drawn seed and leaves a seeded request as it is', () => {
    const request = {
      model: 'm',
      messages: [],
      sampling: { temperature: 1 },
      stream: false,
    } as unknown as CanonicalRequest;
    const seeded = withSeed(request, drawn);
    assert.deepEqual(seeded.sampling, { temperature: 1, seed: 4242 });
    assert.equal(request.sampling.seed, undefined, 'the decoded request is not changed');
    assert.equal(
      withSeed(seeded, () => 1),
      seeded,
    );
  });

  it('seed - drawn seeds are whole numbers below llama.cpp\'s "random" seed, and differ', () => {
    const seeds = Array.from({ length: 1000 }, drawSeed);
    for (const seed of seeds) assert.ok(Number.isInteger(seed) && seed >= 0 && seed <= MAX_DRAWN_SEED, String(seed));
    // 1,000 draws of 2^32 values: a repeat has a chance of about one in ten thousand.
    assert.ok(new Set(seeds).size >= 999);
  });
});
