import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError } from '@cortex/contracts';
import { parseEmbeddingsRequest } from './embeddings.request.js';
import { parseRerankRequest } from './rerank.request.js';

const paramOf = (fn: () => unknown): string | undefined => {
  try {
    fn();
  } catch (error) {
    assert.ok(error instanceof CortexError && error.code === 'invalid_request', String(error));
    return error.extra.param;
  }
  assert.fail('expected a 400');
};

describe('retrieval requests', () => {
  it('embeddings request - the four input shapes', () => {
    assert.deepEqual(parseEmbeddingsRequest({ model: 'm', input: 'a' }).inputs, ['a']);
    assert.deepEqual(parseEmbeddingsRequest({ model: 'm', input: ['a', 'b'] }).inputs, ['a', 'b']);
    assert.deepEqual(parseEmbeddingsRequest({ model: 'm', input: [1, 2, 3] }).inputs, [[1, 2, 3]]);
    assert.deepEqual(parseEmbeddingsRequest({ model: 'm', input: [[1], [2, 3]] }).inputs, [[1], [2, 3]]);
    const request = parseEmbeddingsRequest({
      model: 'm',
      input: 'a',
      encoding_format: 'base64',
      dimensions: 8,
      user: 'u',
    });
    assert.deepEqual([request.encodingFormat, request.dimensions], ['base64', 8]);
    assert.equal(parseEmbeddingsRequest({ model: 'm', input: 'a' }).encodingFormat, 'float');
  });

  it('embeddings request - each bad field is named', () => {
    assert.equal(
      paramOf(() => parseEmbeddingsRequest({ model: 'm', input: ['a', ['b']] })),
      'input[1]',
    );
    assert.equal(
      paramOf(() => parseEmbeddingsRequest({ model: 'm', input: [[1], 'b'] })),
      'input[1]',
    );
    assert.equal(
      paramOf(() => parseEmbeddingsRequest({ model: 'm', input: [[]] })),
      'input[0]',
    );
    assert.equal(
      paramOf(() => parseEmbeddingsRequest({ model: 'm', input: [1.5] })),
      'input[0]',
    );
    assert.equal(
      paramOf(() => parseEmbeddingsRequest({ model: 'm', input: 'a', dimensions: 2.5 })),
      'dimensions',
    );
    assert.equal(
      paramOf(() => parseEmbeddingsRequest({ model: 'm', input: 'a', user: 3 })),
      'user',
    );
    assert.equal(
      paramOf(() => parseEmbeddingsRequest({ model: '', input: 'a' })),
      'model',
    );
    assert.equal(
      paramOf(() => parseEmbeddingsRequest('text')),
      'body',
    );
  });

  it('rerank request - documents as strings or {text}; return_text is return_documents', () => {
    const request = parseRerankRequest({
      model: 'm',
      query: 'q',
      documents: ['a', { text: 'b' }],
      top_n: 1,
      return_text: true,
    });
    assert.deepEqual(request, { model: 'm', query: 'q', documents: ['a', 'b'], topN: 1, returnDocuments: true });
    assert.equal(parseRerankRequest({ model: 'm', query: 'q', documents: ['a'] }).returnDocuments, false);
  });

  it('rerank request - each bad field is named', () => {
    assert.equal(
      paramOf(() => parseRerankRequest({ model: 'm', query: 'q', documents: 'a' })),
      'documents',
    );
    assert.equal(
      paramOf(() => parseRerankRequest({ model: 'm', query: 'q', documents: [''] })),
      'documents[0]',
    );
    assert.equal(
      paramOf(() => parseRerankRequest({ model: 'm', query: 'q', documents: Array.from({ length: 1001 }, () => 'a') })),
      'documents',
    );
    assert.equal(
      paramOf(() => parseRerankRequest({ model: 'm', query: 'q', documents: ['a'], return_documents: 'yes' })),
      'return_documents',
    );
    assert.equal(
      paramOf(() => parseRerankRequest({ model: 'm', query: 7, documents: ['a'] })),
      'query',
    );
  });
});
