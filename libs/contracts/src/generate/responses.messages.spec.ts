import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError } from '../errors/error-codes.js';
import { decodeInputItems, decodeResponseId } from './responses.messages.js';

function rejects(read: () => unknown, param: string): void {
  assert.throws(
    read,
    (error: Error) => error instanceof CortexError && error.code === 'invalid_request' && error.extra.param === param,
    param,
  );
}

describe('responses messages', () => {
  it('responses messages - good payloads pass, unset page options stay out', () => {
    assert.deepEqual(decodeResponseId({ id: 'resp_1' }), { id: 'resp_1' });
    assert.deepEqual(decodeInputItems({ id: 'resp_1', limit: 5, order: 'asc' }), {
      id: 'resp_1',
      limit: 5,
      order: 'asc',
    });
    assert.deepEqual(decodeInputItems({ id: 'resp_1', limit: null }), { id: 'resp_1' });
  });

  it('responses messages - a bad field is named by its path', () => {
    rejects(() => decodeResponseId(null), 'payload');
    rejects(() => decodeResponseId({}), 'id');
    rejects(() => decodeInputItems({ id: 'r', limit: 0 }), 'limit');
    rejects(() => decodeInputItems({ id: 'r', limit: 2.5 }), 'limit');
    rejects(() => decodeInputItems({ id: 'r', order: 'up' }), 'order');
  });
});
