import type { CanonicalRequest, Sampling } from './canonical-request.js';

/**
 * The response header that names the seed each choice sampled with: one integer, or several
 * separated by commas in choice order (`n`, a legacy completion's prompt list). Sent with every
 * generation's response, so a client can replay an answer it did not seed.
 */
export const SEED_HEADER = 'x-cortex-seed';

/**
 * The largest seed a generation draws. llama.cpp reads 2^32 - 1 (`LLAMA_DEFAULT_SEED`) as "pick one
 * at random", which could not be replayed, so drawn seeds stop one below it.
 */
export const MAX_DRAWN_SEED = 0xffff_fffe;

/** A fresh seed, 0 to MAX_DRAWN_SEED, from the platform's cryptographic generator (unpredictable across processes and restarts). */
export function drawSeed(): number {
  const [word] = crypto.getRandomValues(new Uint32Array(1));
  return (word as number) % (MAX_DRAWN_SEED + 1);
}

/**
 * The seed a generation samples with: the request's own, or else a fresh one from `draw`. Without
 * one, node-llama-cpp seeds with the current second, so every unseeded request (and every choice of
 * one) in the same second would write the same text.
 */
export function seedFor(sampling: Pick<Sampling, 'seed'>, draw: () => number = drawSeed): number {
  return sampling.seed ?? draw();
}

/** The request with its seed set (see seedFor); the same object when it has one. */
export function withSeed(request: CanonicalRequest, draw: () => number = drawSeed): CanonicalRequest {
  if (request.sampling.seed !== undefined) return request;
  return { ...request, sampling: { ...request.sampling, seed: seedFor(request.sampling, draw) } };
}
