import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError } from '../errors/error-codes.js';
import { streamSubject } from '../subjects/subjects.js';
import { decodeGenerateCommand, decodeTokenizeCommand } from './generate.messages.js';
import {
  BUILTIN_SAMPLING,
  checkLogitBias,
  decodeSamplingDefaults,
  withSamplingDefaults,
  type Sampling,
  type SamplingDefaults,
} from './canonical-request.js';

const request = () => ({
  model: 'm',
  messages: [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Weather?' },
    {
      role: 'assistant',
      content: '',
      reasoning: 'look it up',
      toolCalls: [{ id: 'c1', name: 'get_weather', arguments: '{"city":"Paris"}' }],
    },
    { role: 'tool', content: '{"temp_c":21}', toolCallId: 'c1', name: 'get_weather' },
  ],
  tools: [{ name: 'get_weather', description: 'Current weather', parameters: { type: 'object' } }],
  toolChoice: 'auto',
  maxToolCalls: 2,
  sampling: {
    temperature: 0.7,
    topP: 0.9,
    topK: 40,
    seed: -3,
    maxTokens: 64,
    stop: ['\n\n'],
    presencePenalty: 0.5,
    frequencyPenalty: -0.5,
  },
  responseFormat: { type: 'json_schema', schema: { type: 'object' } },
  stream: true,
  includeUsage: true,
  showReasoning: false,
  affinityKey: 'session:abc',
});
const command = (changes: (r: ReturnType<typeof request>) => void = () => {}) => {
  const r = request();
  changes(r);
  return {
    runId: 'run1',
    streamSubject: streamSubject('w1', 'run1'),
    request: r,
    priority: { tier: 5, account: 'team-a', keyId: 'key_0123' },
  };
};

function rejects(payload: unknown, param: string): void {
  assert.throws(
    () => decodeGenerateCommand(payload),
    (error: unknown) => {
      assert.ok(error instanceof CortexError);
      assert.equal(error.code, 'invalid_request');
      assert.equal(error.extra.param, param);
      assert.ok(error.message.startsWith(`${param}: `), error.message);
      return true;
    },
  );
}

describe('canonical request decoding', () => {
  it('canonical request - a command that uses every field passes unchanged', () => {
    const payload = command();
    assert.equal(decodeGenerateCommand(payload), payload);
    assert.deepEqual(decodeGenerateCommand(structuredClone(payload)), command());
    assert.deepEqual(decodeTokenizeCommand({ request: request() }), { request: request() });
  });

  it('canonical request - optional fields may be absent or null', () => {
    const minimal = {
      runId: 'r',
      streamSubject: 's',
      request: { model: 'm', messages: [], sampling: {}, stream: false, tools: null, responseFormat: null },
    };
    assert.equal(decodeGenerateCommand(minimal), minimal);
  });

  it("canonical request - a message's images stand within its content, in order, each with bytes or a URL", () => {
    const image = { at: 3, part: 'messages[1].content[1]', data: 'iVBOR', mediaType: 'image/png', width: 4, height: 3 };
    const withImages = (images: unknown[]) =>
      command((r) => void ((r.messages[1] as { images?: unknown }).images = images));
    assert.doesNotThrow(() =>
      decodeGenerateCommand(withImages([image, { ...image, at: 8, data: undefined, url: 'https://x/y.png' }])),
    );
    rejects(withImages([{ ...image, at: 9 }]), 'request.messages[1].images[0].at');
    rejects(withImages([image, { ...image, at: 2 }]), 'request.messages[1].images[1].at');
    rejects(withImages([{ ...image, url: 'https://x/y.png' }]), 'request.messages[1].images[0]');
    rejects(withImages([{ ...image, data: undefined }]), 'request.messages[1].images[0]');
    rejects(withImages([{ ...image, part: undefined }]), 'request.messages[1].images[0].part');
    rejects(withImages([{ ...image, detail: 'huge' }]), 'request.messages[1].images[0].detail');
    rejects(withImages([{ ...image, width: 0 }]), 'request.messages[1].images[0].width');
  });

  it('canonical request - each rule names the field that breaks it', () => {
    rejects('generate me', 'generate');
    rejects({ ...command(), runId: 7 }, 'runId');
    rejects({ ...command(), streamSubject: undefined }, 'streamSubject');
    rejects({ ...command(), request: [] }, 'request');
    rejects({ ...command(), priority: 5 }, 'priority');
    for (const tier of [10, -1, 1.5, '5', undefined]) rejects({ ...command(), priority: { tier } }, 'priority.tier');
    rejects({ ...command(), priority: { tier: 3, account: 7 } }, 'priority.account');
    rejects({ ...command(), priority: { tier: 3, account: 'a'.repeat(65) } }, 'priority.account');
    rejects(
      command((r) => void ((r as { model: unknown }).model = null)),
      'request.model',
    );
    rejects(
      command((r) => void ((r as { messages: unknown }).messages = 'hi')),
      'request.messages',
    );
    rejects(
      command((r) => void ((r.messages[1] as { role: string }).role = 'robot')),
      'request.messages[1].role',
    );
    rejects(
      command((r) => void ((r.messages[0] as { content: unknown }).content = ['x'])),
      'request.messages[0].content',
    );
    rejects(
      command((r) => void ((r.messages[2]!.toolCalls![0] as { arguments: unknown }).arguments = { city: 'Paris' })),
      'request.messages[2].toolCalls[0].arguments',
    );
    rejects(
      command((r) => void ((r.messages[3] as { toolCallId: unknown }).toolCallId = 1)),
      'request.messages[3].toolCallId',
    );
    rejects(
      command((r) => void ((r.tools[0] as { parameters: unknown }).parameters = 'object')),
      'request.tools[0].parameters',
    );
    rejects(
      command((r) => void ((r.tools[0] as unknown as { strict: unknown }).strict = 'yes')),
      'request.tools[0].strict',
    );
    rejects(
      command((r) => void ((r as { toolChoice: unknown }).toolChoice = { type: 'any' })),
      'request.toolChoice',
    );
    rejects(
      command((r) => void (r.maxToolCalls = 0)),
      'request.maxToolCalls',
    );
    rejects(
      command((r) => void ((r as { sampling: unknown }).sampling = undefined)),
      'request.sampling',
    );
    rejects(
      command((r) => void (r.sampling.temperature = 2.5)),
      'request.sampling.temperature',
    );
    rejects(
      command((r) => void (r.sampling.topP = -0.1)),
      'request.sampling.topP',
    );
    rejects(
      command((r) => void (r.sampling.topK = 1.5)),
      'request.sampling.topK',
    );
    rejects(
      command((r) => void (r.sampling.maxTokens = -1)),
      'request.sampling.maxTokens',
    );
    rejects(
      command((r) => void (r.sampling.presencePenalty = Number.POSITIVE_INFINITY)),
      'request.sampling.presencePenalty',
    );
    rejects(
      command((r) => void (r.sampling.stop = Array.from({ length: 17 }, () => 'x'))),
      'request.sampling.stop',
    );
    rejects(
      command((r) => void (r.sampling.stop = ['ok', 'x'.repeat(257)])),
      'request.sampling.stop[1]',
    );
    rejects(
      command((r) => void ((r.responseFormat as { type: string }).type = 'xml')),
      'request.responseFormat.type',
    );
    rejects(
      command((r) => void ((r as { stream: unknown }).stream = 'yes')),
      'request.stream',
    );
    rejects(
      command((r) => void ((r as { includeUsage: unknown }).includeUsage = 1)),
      'request.includeUsage',
    );
    rejects(
      command((r) => void (r.affinityKey = 'k'.repeat(513))),
      'request.affinityKey',
    );
  });
});

describe('sampling defaults', () => {
  const cases: Array<[string, Sampling, Array<SamplingDefaults | undefined>, Sampling]> = [
    [
      'nothing set: the first default that sets a field',
      {},
      [{ temperature: 0.2 }, { temperature: 1.5, topK: 20 }],
      { temperature: 0.2, topK: 20 },
    ],
    ['the request wins', { temperature: 0, maxTokens: 4 }, [{ temperature: 0.2 }], { temperature: 0, maxTokens: 4 }],
    [
      'an "off" value is a value',
      { topK: 0, repetitionPenalty: 1 },
      [{ topK: 20, repetitionPenalty: 1.05 }],
      { topK: 0, repetitionPenalty: 1 },
    ],
    ['missing layers are skipped', { seed: 7 }, [undefined, { minP: 0.05 }, undefined], { seed: 7, minP: 0.05 }],
    [
      'only sampling defaults are taken from a layer',
      {},
      [{ temperature: 1, ...({ maxTokens: 9 } as object) }],
      { temperature: 1 },
    ],
    [
      'the built-in layer fills the rest',
      { temperature: 0.6 },
      [BUILTIN_SAMPLING],
      { ...BUILTIN_SAMPLING, temperature: 0.6 },
    ],
  ];
  for (const [name, sampling, layers, expected] of cases) {
    it(`sampling defaults - ${name}`, () => assert.deepEqual(withSamplingDefaults(sampling, ...layers), expected));
  }

  it("sampling defaults - they cross the bus in the ranges a request may set; logit_bias is checked like a request's", () => {
    assert.deepEqual(decodeSamplingDefaults({ temperature: 1.5, topK: 0 }, 'facts.sampling'), {
      temperature: 1.5,
      topK: 0,
    });
    assert.equal(decodeSamplingDefaults(undefined, 'facts.sampling'), undefined);
    assert.throws(() => decodeSamplingDefaults({ temperature: 3 }, 'facts.sampling'), /facts\.sampling\.temperature/);
    assert.throws(() => checkLogitBias({ '1': 200 }, 'sampling.logitBias'), /sampling\.logitBias\.1/);
  });
});
