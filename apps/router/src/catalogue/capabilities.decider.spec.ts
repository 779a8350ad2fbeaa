import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { ModelFacts } from '@cortex/contracts';
import { beforeLoad } from './capabilities.decider.js';

type Model = Parameters<typeof beforeLoad>[0];
const chat: Model = { kind: 'chat' };
const hermes: ModelFacts = { architecture: 'qwen3', chatFormat: { id: 'hermes', tools: true, reasoning: true } };

describe('capabilities before a load', () => {
  const cases: Array<[string, Model, ModelFacts | undefined, ReturnType<typeof beforeLoad>]> = [
    [
      'a GGUF whose template is recognised: its format, calls and reasoning',
      chat,
      hermes,
      { tools: true, reasoning: true, format: 'hermes', vision: false },
    ],
    [
      'with a projector in the catalogue: it takes images',
      { ...chat, mmproj: 'fixture:mmproj-cortex-vision' },
      hermes,
      { tools: true, reasoning: true, format: 'hermes', vision: true },
    ],
    ['its header not read yet: unknown', chat, undefined, null],
    ['a template not recognised by its text: unknown until a load derives it', chat, { architecture: 'llama' }, null],
    ["the catalogue's own template, read only at load: unknown", { ...chat, chatTemplate: '{{ x }}' }, hermes, null],
    ['the catalogue naming another format: unknown', { ...chat, format: 'llama3' }, hermes, null],
    [
      'the catalogue naming the same format',
      { ...chat, format: 'hermes' },
      hermes,
      { tools: true, reasoning: true, format: 'hermes', vision: false },
    ],
    ['an embedding model: no chat capabilities', { kind: 'embedding' }, hermes, null],
    [
      'an upstream model: the catalogue says, with no header',
      {
        ...chat,
        upstream: { url: 'http://gpu-box:8080/v1', api: 'chat', reasoning: true, vision: false } as Model['upstream'],
      },
      undefined,
      { tools: true, reasoning: true, vision: false, format: 'upstream chat', completions: false },
    ],
  ];
  for (const [name, model, facts, expected] of cases)
    it(`capabilities before a load - ${name}`, () => assert.deepEqual(beforeLoad(model, facts), expected));
});
