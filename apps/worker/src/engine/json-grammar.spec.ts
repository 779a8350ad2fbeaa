import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { getLlama, LlamaCompletion, LlamaLogLevel, type Llama } from 'node-llama-cpp';
import { boundNumbers, createJsonGrammar, grammarSchema, INTEGER_RULE, NUMBER_RULE } from './json-grammar.js';

const STORIES = fileURLToPath(new URL('../../../../../shared/models/stories260K.gguf', import.meta.url));

describe('json grammar - rules', () => {
  it('json grammar - replaces node-llama-cpp number rules with bounded ones', () => {
    const generated = [
      'root ::= "{" "\\"n\\"" ":" integer-number-rule "," "\\"x\\"" ":" fractional-number-rule "}"',
      'integer-number-rule ::= "-"? ("0" | [1-9] [0-9]{0,15}) ([eE] [-+]? ("0" | [1-9] [0-9]{0,15}))?',
      'fractional-number-rule ::= "-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? ("0" | [1-9] [0-9]{0,15}))?',
    ].join('\n');
    const lines = boundNumbers(generated).split('\n');
    assert.equal(lines[0], generated.split('\n')[0]);
    assert.equal(lines[1], `integer-number-rule ::= ${INTEGER_RULE}`);
    assert.equal(lines[2], `fractional-number-rule ::= ${NUMBER_RULE}`);
    assert.doesNotMatch(INTEGER_RULE, /[eE.]/, 'an integer has neither fraction nor exponent');
  });

  it('json grammar - the built-in json grammar number rule is bounded too', () => {
    assert.equal(
      boundNumbers('number ::= ("-"? [0-9]+) ws\nws ::= " "?'),
      `number ::= (${NUMBER_RULE}) ws\nws ::= " "?`,
    );
  });

  it('json grammar - a number rule it does not know is an error, not left unbounded', () => {
    assert.throws(() => boundNumbers('big-number-rule ::= [0-9]+'), /unrecognised number rule/);
  });

  it('json grammar - a minimum of 0 or more drops the sign from the rule', () => {
    const schema = grammarSchema({
      type: 'object',
      properties: {
        count: { type: 'integer', minimum: 0 },
        id: { type: 'integer', exclusiveMinimum: 0 },
        area: { type: 'number', minimum: 0 },
        delta: { type: 'integer', minimum: -1 },
      },
    }) as { properties: Record<string, { const?: string }> };
    const grammar = boundNumbers(
      ['count', 'id', 'area'].map((name) => `${name} ::= "\\"${schema.properties[name]?.const}\\""`).join('\n'),
    );
    assert.deepEqual(grammar.split('\n'), [
      'count ::= (("0" | [1-9] [0-9]{0,14}))',
      'id ::= ([1-9] [0-9]{0,14})',
      'area ::= (("0" | [1-9] [0-9]{0,14}) ("." [0-9]{1,15})? ([eE] [-+]? [0-9]{1,2})?)',
    ]);
    assert.deepEqual(schema.properties.delta, { type: 'integer', minimum: -1 });
  });

  it('json grammar - anyOf becomes oneOf, small integer ranges become enums, names and data stay', () => {
    const schema = {
      type: 'object',
      properties: {
        anyOf: { anyOf: [{ type: 'string' }, { type: 'null' }] },
        rating: { type: 'integer', minimum: 1, maximum: 5 },
        odd: { type: 'integer', exclusiveMinimum: 0, exclusiveMaximum: 3 },
        year: { type: 'integer', minimum: -5000, maximum: 3000 },
        tag: { type: 'string', enum: ['anyOf'], default: { anyOf: 1 } },
      },
      required: ['anyOf'],
    };
    assert.deepEqual(grammarSchema(schema), {
      type: 'object',
      properties: {
        anyOf: { oneOf: [{ type: 'string' }, { type: 'null' }] },
        rating: { minimum: 1, maximum: 5, enum: [1, 2, 3, 4, 5] },
        odd: { exclusiveMinimum: 0, exclusiveMaximum: 3, enum: [1, 2] },
        year: { type: 'integer', minimum: -5000, maximum: 3000 },
        tag: { type: 'string', enum: ['anyOf'], default: { anyOf: 1 } },
      },
      required: ['anyOf'],
    });
  });
});

describe('json grammar - generation', { skip: !existsSync(STORIES) && 'no ../shared/models' }, () => {
  let llama: Llama;
  before(async () => {
    llama = await getLlama({ gpu: false, logLevel: LlamaLogLevel.error });
  });
  after(async () => {
    await llama.dispose();
  });

  // node-llama-cpp's own grammar wrote `-0e-8`, `-2e5` and `-111e0` for integers and `-3.25e-1000`
  // for a number under some of these seeds.
  it('json grammar - sampled integers have no fraction or exponent and numbers stay finite', async () => {
    const schema = {
      type: 'object',
      properties: {
        population: { type: 'integer' },
        founded: { type: 'integer' },
        area: { type: 'number' },
        count: { type: 'integer', minimum: 0 },
      },
      required: ['population', 'founded', 'area', 'count'],
      additionalProperties: false,
    };
    const model = await llama.loadModel({ modelPath: STORIES });
    const context = await model.createContext({ contextSize: 512, threads: 1 });
    const sequence = context.getSequence();
    try {
      const grammar = await createJsonGrammar(llama, schema);
      for (const temperature of [1, 2]) {
        for (let seed = 1; seed <= 6; seed++) {
          await sequence.clearHistory();
          const completion = new LlamaCompletion({ contextSequence: sequence, autoDisposeSequence: false });
          const text = await completion.generateCompletion('Once upon a time', {
            grammar,
            maxTokens: 200,
            temperature,
            seed,
          });
          const at = `temperature ${temperature} seed ${seed}: ${text}`;
          for (const field of ['population', 'founded']) {
            assert.match(text, new RegExp(`"${field}":\\s*-?(0|[1-9][0-9]{0,14})\\s*[,}]`), at);
          }
          // This model writes negative numbers by preference: a minimum of 0 must still hold.
          assert.match(text, /"count":\s*(0|[1-9][0-9]{0,14})\s*[,}]/, at);
          const area = /"area":\s*([^,}\s]+)/.exec(text)?.[1] ?? '';
          assert.match(area, /^-?(0|[1-9][0-9]{0,14})(\.[0-9]{1,15})?([eE][-+]?[0-9]{1,2})?$/, at);
          // Finite, and not a non-zero mantissa that underflowed to 0.
          assert.ok(Number.isFinite(Number(area)), at);
          if (Number(area) === 0) assert.match(area, /^-?[0.]+([eE]|$)/, at);
        }
      }
    } finally {
      await context.dispose();
      await model.dispose();
    }
  });
});
