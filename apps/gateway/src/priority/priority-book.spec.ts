import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { PriorityBook } from './priority-book.js';

describe('priority book', () => {
  it('priority book - a request reads its own entry; a WebSocket turn reads its connection’s', () => {
    const book = new PriorityBook();
    book.set('req_1', { tier: 7, account: 'team-a', keyId: 'key_1' });
    book.set('req_1.2', { tier: 2 });
    assert.deepEqual(book.of('req_1'), { tier: 7, account: 'team-a', keyId: 'key_1' });
    assert.deepEqual(book.of('req_1.3'), { tier: 7, account: 'team-a', keyId: 'key_1' });
    assert.deepEqual(book.of('req_1.2'), { tier: 2 }, 'an exact entry wins');
    assert.equal(book.of('req_9'), undefined);
    assert.equal(book.of('.5'), undefined);
  });

  it('priority book - forget drops the entry after the delay, unless the request id was given a newer one', async () => {
    const book = new PriorityBook();
    book.set('a', { tier: 3 }).forget(0);
    const first = book.set('b', { tier: 3 });
    book.set('b', { tier: 4 });
    first.forget(0);
    await new Promise((done) => setTimeout(done, 5));
    assert.equal(book.of('a'), undefined);
    assert.deepEqual(book.of('b'), { tier: 4 });
    assert.equal(book.size, 1);
  });
});
