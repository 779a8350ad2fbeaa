import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ggufSamplingDefaults } from './sampling-defaults.js';

describe('GGUF sampling defaults', () => {
  const cases: Array<[string, unknown, object]> = [
    ['no general section', undefined, {}],
    ['no sampling keys', { architecture: 'qwen3' }, {}],
    // Qwen3's generation_config.json as llama.cpp's convert script writes it (float32 in the file).
    [
      'Qwen3 thinking',
      { sampling: { temp: Math.fround(0.6), top_p: Math.fround(0.95), top_k: 20, min_p: 0 } },
      { temperature: 0.6, topP: 0.95, topK: 20, minP: 0 },
    ],
    ['gpt-oss', { sampling: { temp: 1 } }, { temperature: 1 }],
    [
      'penalties',
      { sampling: { penalty_repeat: Math.fround(1.05), penalty_last_n: 256 } },
      { repetitionPenalty: 1.05, repeatLastN: 256 },
    ],
    [
      'llama.cpp\'s "whole context" and out-of-range values left out',
      { sampling: { penalty_last_n: -1, temp: 3, top_p: 1.5, top_k: -1, min_p: 'x', penalty_repeat: 0 } },
      {},
    ],
    ['top_k 0 (off) kept', { sampling: { top_k: 0 } }, { topK: 0 }],
    [
      'keys cortex has no setting for ignored',
      { sampling: { mirostat: 2, xtc_probability: 0.5, sequence: 'penalties;top_k' } },
      {},
    ],
  ];
  for (const [name, general, expected] of cases) {
    it(`GGUF sampling defaults - ${name}`, () => assert.deepEqual(ggufSamplingDefaults(general), expected));
  }
});
