import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { getLlama, LlamaCompletion, LlamaLogLevel, type Llama } from 'node-llama-cpp';
import {
  boundNumbers,
  createJsonGrammar,
  grammarSchema,
  INTEGER_RULE,
  NUMBER_RULE,
  schemaGrammar,
  type OptionalObject,
} from './json-grammar.js';

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

describe('json grammar - objects with optional properties', () => {
  it('json grammar - an object whose properties are not all required is a stand-in, collected with its rewritten properties', () => {
    const objects: OptionalObject[] = [];
    const schema = grammarSchema(
      {
        type: 'object',
        properties: {
          path: { type: 'string' },
          range: {
            type: 'object',
            properties: {
              head: { type: 'integer', minimum: 0 },
              tail: { anyOf: [{ type: 'integer' }, { type: 'null' }] },
            },
          },
        },
        required: ['path'],
        $schema: 'http://json-schema.org/draft-07/schema#',
      },
      objects,
    );
    assert.deepEqual(schema, { const: 'cortex-grammar:object:1' });
    assert.deepEqual(objects, [
      {
        properties: {
          head: { const: 'cortex-grammar:non-negative-integer' },
          tail: { oneOf: [{ type: 'integer' }, { type: 'null' }] },
        },
        required: [],
      },
      { properties: { path: { type: 'string' }, range: { const: 'cortex-grammar:object:0' } }, required: ['path'] },
    ]);
  });

  it('json grammar - every property required, other properties allowed, or schemas combined: node-llama-cpp writes it', () => {
    const objects: OptionalObject[] = [];
    const all = { type: 'object', properties: { a: { type: 'string' } }, required: ['a'] };
    const open = { type: 'object', properties: { a: { type: 'string' } }, additionalProperties: true };
    const combined = { type: 'object', properties: { a: { type: 'string' } }, oneOf: [{ required: ['a'] }] };
    for (const schema of [all, open, combined]) assert.deepEqual(grammarSchema(schema, objects), schema);
    assert.deepEqual(objects, []);
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

  it('json grammar - the rule of an object with optional properties writes each at most once, in order, the required always', async () => {
    const { grammar } = await schemaGrammar(llama, {
      type: 'object',
      properties: { path: { type: 'string' }, head: { type: 'integer' }, tail: { type: 'integer' } },
      required: ['path'],
      additionalProperties: false,
    });
    const rules = new Map(grammar.split('\n').map((line) => line.split(' ::= ') as [string, string]));
    assert.equal(rules.get('root')?.startsWith('cgo0 '), true, grammar);
    assert.equal(rules.get('cgo0'), '"{" cgo-ws cgo0-first-0 cgo-ws "}"');
    assert.equal(rules.get('cgo0-first-0'), 'cgo0-member-0 cgo0-rest-1');
    assert.equal(rules.get('cgo0-rest-1'), '("," cgo-ws cgo0-member-1)? cgo0-rest-2');
    assert.equal(rules.get('cgo0-rest-2'), '("," cgo-ws cgo0-member-2)?');
    assert.equal(rules.get('cgo0-member-0'), '"\\"path\\"" ":" [ ]? cgo0-v0-root');
    assert.match(rules.get('cgo0-v1-root') ?? '', /integer-number-rule/);
    assert.ok(!grammar.includes('cortex-grammar:object'), grammar);
  });

  it('json grammar - sampled objects with optional properties parse, name only declared keys, and keep the required ones', async () => {
    const schema = {
      type: 'object',
      properties: {
        city: { type: 'string' },
        days: { type: 'integer', minimum: 1, maximum: 7 },
        units: { enum: ['metric', 'imperial'] },
        detail: { type: 'object', properties: { hourly: { type: 'boolean' } } },
      },
      required: ['city'],
      additionalProperties: false,
    };
    const model = await llama.loadModel({ modelPath: STORIES });
    const context = await model.createContext({ contextSize: 512, threads: 1 });
    const sequence = context.getSequence();
    try {
      const grammar = await createJsonGrammar(llama, schema);
      for (let seed = 1; seed <= 8; seed++) {
        await sequence.clearHistory();
        const completion = new LlamaCompletion({ contextSequence: sequence, autoDisposeSequence: false });
        const text = await completion.generateCompletion('Once upon a time', {
          grammar,
          maxTokens: 200,
          temperature: 1,
          seed,
        });
        const at = `seed ${seed}: ${text}`;
        const value = JSON.parse(text) as Record<string, unknown>;
        assert.equal(typeof value.city, 'string', at);
        const keys = Object.keys(value);
        const order = ['city', 'days', 'units', 'detail'];
        assert.deepEqual(
          keys,
          order.filter((key) => keys.includes(key)),
          at,
        );
        if ('days' in value) assert.ok(Number.isInteger(value.days) && (value.days as number) >= 1, at);
        if ('units' in value) assert.ok(['metric', 'imperial'].includes(value.units as string), at);
        if ('detail' in value) for (const key of Object.keys(value.detail as object)) assert.equal(key, 'hourly', at);
      }
    } finally {
      await context.dispose();
      await model.dispose();
    }
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
