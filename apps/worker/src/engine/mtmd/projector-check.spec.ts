import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { visionGguf } from '@cortex/fixtures';
import { projectorProblem, type ProjectorHeader } from './projector-check.js';

/** The vision fixture's projector header, as checkProjector reads it, with `change` applied. */
function fixture(
  change: (metadata: Record<string, unknown>, tensors: Map<string, number[]>) => void = () => {},
): ProjectorHeader {
  const { projector } = visionGguf();
  const metadata = Object.fromEntries(Object.entries(projector.metadata).map(([key, v]) => [key, v.value]));
  const tensors = new Map(projector.tensors.map((t) => [t.name, [...t.dims]]));
  change(metadata, tensors);
  return { metadata, tensors };
}

describe('projector check', () => {
  const cases: Array<[string, ProjectorHeader, number | undefined, RegExp | null]> = [
    ['the fixture fits its 32-wide text model', fixture(), 32, null],
    ['a text model of another width', fixture(), 64, /32 wide, but the text model's are 64/],
    ['a text model, not a projector', fixture((m) => (m['general.architecture'] = 'llama')), 32, /not a projector/],
    ['no vision encoder', fixture((m) => delete m['clip.has_vision_encoder']), 32, /no vision encoder/],
    [
      'a required key missing',
      fixture((m) => delete m['clip.vision.patch_size']),
      32,
      /lacks clip\.vision\.patch_size/,
    ],
    ['image_mean too short', fixture((m) => (m['clip.vision.image_mean'] = [0])), 32, /image_mean must list/],
    // A missing tensor crashes clip's warm-up: it must be caught here.
    ['an mlp tensor missing', fixture((_, t) => t.delete('mm.0.bias')), 32, /lacks the tensors mm\.0\.bias/],
    [
      'another projector type is left to clip past the common checks',
      fixture((m) => (m['clip.projector_type'] = 'gemma3')),
      64,
      null,
    ],
  ];
  for (const [name, header, width, expected] of cases) {
    it(`projector check - ${name}`, () => {
      const problem = projectorProblem(header, width);
      if (expected === null) assert.equal(problem, null);
      else assert.match(problem ?? '', expected);
    });
  }
});
