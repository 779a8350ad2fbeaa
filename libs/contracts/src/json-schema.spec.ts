import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError } from './errors/error-codes.js';
import { compileJsonSchema, jsonSchema, jsonSchemaMismatch } from './json-schema.js';

describe('json schema', () => {
  it('json schema - $schema picks draft-07 or 2020-12, and either compiles', () => {
    // Draft-07 tuples are `items: [...]`; 2020-12 calls them `prefixItems` and reads `items` as the rest.
    const draft7 = {
      $schema: 'http://json-schema.org/draft-07/schema#',
      type: 'array',
      items: [{ type: 'string' }],
      additionalItems: false,
    };
    assert.equal(compileJsonSchema(draft7)(['a']), true);
    assert.equal(compileJsonSchema(draft7)(['a', 'b']), false);
    const draft2020 = {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'array',
      prefixItems: [{ type: 'string' }],
      items: false,
    };
    assert.equal(compileJsonSchema(draft2020)(['a']), true);
    assert.equal(compileJsonSchema(draft2020)(['a', 'b']), false);
  });

  it('json schema - the same $id with two schemas compiles both; formats and vendor keywords are ignored', () => {
    assert.equal(compileJsonSchema({ $id: 'reply', type: 'string' })('x'), true);
    assert.equal(compileJsonSchema({ $id: 'reply', type: 'number' })(1), true);
    assert.equal(compileJsonSchema({ type: 'string', format: 'date-time', 'x-vendor': true })('not a date'), true);
  });

  it('json schema - a field that is not a compilable schema is invalid_request naming it', () => {
    for (const value of [null, 'object', [], { type: 'objekt' }, { $ref: '#/$defs/missing' }]) {
      assert.throws(
        () => jsonSchema(value, 'text.format.schema'),
        (error: Error) =>
          error instanceof CortexError &&
          error.code === 'invalid_request' &&
          error.extra.param === 'text.format.schema',
        JSON.stringify(value),
      );
    }
  });

  it('json schema - a mismatch says where and why; a match is null', () => {
    const schema = { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] };
    assert.equal(jsonSchemaMismatch(schema, '{"n": 3}'), null);
    assert.equal(jsonSchemaMismatch(schema, '{"n": 3.5}'), 'output/n must be integer');
    assert.match(jsonSchemaMismatch(schema, '{"n": ') ?? '', /^it is not JSON/);
  });
});
