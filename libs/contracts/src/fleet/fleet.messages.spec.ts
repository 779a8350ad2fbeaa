import 'reflect-metadata';
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError } from '../errors/error-codes.js';
import { decodeDecodeRequest } from '../generate/generate.messages.js';
import { decodePlaceRequest } from './fleet.messages.js';

/** The reader throws `invalid_request` whose param names `field`. */
const rejects = (read: () => unknown, field: string): void =>
  assert.throws(
    read,
    (error: unknown) => error instanceof CortexError && error.code === 'invalid_request' && error.extra.param === field,
    field,
  );

describe('place and decode readers', () => {
  it('place - a full request and a bare one pass unchanged', () => {
    const full = {
      model: 'm',
      exclude: ['w1', 'w2'],
      affinity: 'session:a',
      prefixes: ['p2', 'p1'],
      runId: 'r1',
      attempt: 2,
      kind: 'embedding',
      readyOnly: true,
    };
    assert.deepEqual(decodePlaceRequest(full), full);
    assert.deepEqual(decodePlaceRequest({ model: 'm' }), { model: 'm' });
    assert.deepEqual(decodePlaceRequest({ model: 'm', affinity: null, kind: null }), {
      model: 'm',
      affinity: null,
      kind: null,
    });
  });

  it('place - each bad field is named', () => {
    rejects(() => decodePlaceRequest('m'), 'place');
    rejects(() => decodePlaceRequest({}), 'model');
    rejects(() => decodePlaceRequest({ model: 1 }), 'model');
    rejects(() => decodePlaceRequest({ model: 'm', exclude: 'w1' }), 'exclude');
    rejects(() => decodePlaceRequest({ model: 'm', exclude: ['w1', 2] }), 'exclude[1]');
    rejects(() => decodePlaceRequest({ model: 'm', affinity: 'x'.repeat(513) }), 'affinity');
    rejects(() => decodePlaceRequest({ model: 'm', prefixes: 'p' }), 'prefixes');
    rejects(
      () => decodePlaceRequest({ model: 'm', prefixes: Array.from({ length: 33 }, (_, i) => `p${i}`) }),
      'prefixes',
    );
    rejects(() => decodePlaceRequest({ model: 'm', prefixes: ['p', 7] }), 'prefixes[1]');
    rejects(() => decodePlaceRequest({ model: 'm', prefixes: ['p'.repeat(65)] }), 'prefixes[0]');
    rejects(() => decodePlaceRequest({ model: 'm', runId: 'r'.repeat(65) }), 'runId');
    rejects(() => decodePlaceRequest({ model: 'm', attempt: -1 }), 'attempt');
    rejects(() => decodePlaceRequest({ model: 'm', attempt: 1.5 }), 'attempt');
    rejects(() => decodePlaceRequest({ model: 'm', kind: 'vision' }), 'kind');
    rejects(() => decodePlaceRequest({ model: 'm', readyOnly: 'yes' }), 'readyOnly');
  });

  it('decode - a request passes unchanged; each bad field is named', () => {
    const request = { dialect: 'openai.chat', body: { model: 'm' }, session: 'session:s', socket: { previous: null } };
    assert.deepEqual(decodeDecodeRequest(request), request);
    rejects(() => decodeDecodeRequest(null), 'decode');
    rejects(() => decodeDecodeRequest({ dialect: 'openai.images', body: {} }), 'dialect');
    rejects(() => decodeDecodeRequest({ dialect: 'openai.chat', body: [] }), 'body');
    rejects(() => decodeDecodeRequest({ dialect: 'openai.chat', body: {}, session: 's'.repeat(513) }), 'session');
    rejects(() => decodeDecodeRequest({ dialect: 'openai.chat', body: {}, socket: 'x' }), 'socket');
  });
});
