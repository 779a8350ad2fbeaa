import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError } from '../errors/error-codes.js';
import { decodeInputItems, decodeResponseId, decodeStoreResponse } from './responses.messages.js';

function rejects(read: () => unknown, param: string): void {
  assert.throws(read, (error: Error) => error instanceof CortexError && error.code === 'invalid_request' && error.extra.param === param, param);
}

const state = { responseId: 'resp_1', createdAt: 1, echo: {}, store: true, input: [{ type: 'message' }], chain: ['resp_0'] };
const resource = { id: 'resp_1', object: 'response' };

describe('responses messages', () => {
  it('responses messages - good payloads pass, unset page options stay out', () => {
    assert.deepEqual(decodeResponseId({ id: 'resp_1' }), { id: 'resp_1' });
    assert.deepEqual(decodeInputItems({ id: 'resp_1', limit: 5, order: 'asc' }), { id: 'resp_1', limit: 5, order: 'asc' });
    assert.deepEqual(decodeInputItems({ id: 'resp_1', limit: null }), { id: 'resp_1' });
    assert.deepEqual(decodeStoreResponse({ state, resource }), { state, resource });
  });

  it('responses messages - a bad field is named by its path', () => {
    rejects(() => decodeResponseId(null), 'payload');
    rejects(() => decodeResponseId({}), 'id');
    rejects(() => decodeInputItems({ id: 'r', limit: 0 }), 'limit');
    rejects(() => decodeInputItems({ id: 'r', limit: 2.5 }), 'limit');
    rejects(() => decodeInputItems({ id: 'r', order: 'up' }), 'order');
    rejects(() => decodeStoreResponse({ resource }), 'state');
    rejects(() => decodeStoreResponse({ state: { ...state, store: 'yes' }, resource }), 'state.store');
    rejects(() => decodeStoreResponse({ state: { ...state, chain: [1] }, resource }), 'state.chain[0]');
    rejects(() => decodeStoreResponse({ state: { ...state, input: ['text'] }, resource }), 'state.input[0]');
    rejects(() => decodeStoreResponse({ state, resource: { object: 'response' } }), 'resource.id');
  });
});
