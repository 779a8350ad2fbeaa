import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError } from '@cortex/contracts';
import { decodeSocketMessage, decodeSocketTurn, socketErrorEvent } from './responses.socket.js';

const invalid = (param: string, message: RegExp) => (error: Error) =>
  error instanceof CortexError &&
  error.code === 'invalid_request' &&
  error.extra.param === param &&
  message.test(error.message);

describe('responses socket - client messages', () => {
  it('responses socket - response.create becomes a streaming create body without its type', () => {
    const message = decodeSocketMessage(
      JSON.stringify({ type: 'response.create', model: 'm', input: 'hi', store: false }),
    );
    assert.deepEqual(message, {
      type: 'response.create',
      body: { model: 'm', input: 'hi', store: false, stream: true },
      generate: true,
    });
  });

  it("responses socket - Codex's shape (stream: true, stream_options, background: false) is accepted", () => {
    const message = {
      type: 'response.create',
      model: 'm',
      input: [],
      stream: true,
      stream_options: { include_obfuscation: false },
      background: false,
      generate: true,
      client_metadata: { a: 'b' },
    };
    assert.deepEqual(decodeSocketMessage(JSON.stringify(message)), {
      type: 'response.create',
      body: {
        model: 'm',
        input: [],
        stream: true,
        stream_options: { include_obfuscation: false },
        client_metadata: { a: 'b' },
      },
      generate: true,
    });
  });

  it("responses socket - Codex's warm-up (generate: false) and response.processed are accepted", () => {
    const warmUp = {
      type: 'response.create',
      model: 'm',
      input: [],
      stream: true,
      store: false,
      generate: false,
      prompt_cache_key: 'k',
    };
    assert.deepEqual(decodeSocketMessage(JSON.stringify(warmUp)), {
      type: 'response.create',
      body: { model: 'm', input: [], stream: true, store: false, prompt_cache_key: 'k' },
      generate: false,
    });
    assert.deepEqual(decodeSocketMessage(JSON.stringify({ type: 'response.processed', response_id: 'resp_1' })), {
      type: 'response.processed',
    });
  });

  it('responses socket - what cannot hold on a socket is refused naming the field', () => {
    assert.throws(
      () => decodeSocketMessage(JSON.stringify({ type: 'response.create', model: 'm', background: true })),
      invalid('background', /POST \/v1\/responses/),
    );
    assert.throws(
      () => decodeSocketMessage(JSON.stringify({ type: 'response.create', model: 'm', stream: false })),
      invalid('stream', /always streams/),
    );
    assert.throws(
      () => decodeSocketMessage(JSON.stringify({ type: 'response.create', model: 'm', generate: 'no' })),
      invalid('generate', /boolean/),
    );
    assert.throws(
      () => decodeSocketMessage(JSON.stringify({ type: 'response.cancel' })),
      invalid('type', /"response.cancel" is not a client event here/),
    );
    assert.throws(() => decodeSocketMessage(JSON.stringify([1])), invalid('message', /object/));
    assert.throws(
      () => decodeSocketMessage('{"type": '),
      (error: Error) =>
        error instanceof CortexError && error.code === 'invalid_request' && /not JSON/.test(error.message),
    );
  });

  it('responses socket - the error envelope has the spec shape', () => {
    const envelope = socketErrorEvent(
      { code: 'previous_response_not_found', message: 'gone', param: 'previous_response_id' },
      404,
    );
    assert.deepEqual(envelope, {
      type: 'error',
      status: 404,
      error: {
        type: 'invalid_request_error',
        code: 'previous_response_not_found',
        message: 'gone',
        param: 'previous_response_id',
      },
    });
  });
});

describe('responses socket - connection state on the bus', () => {
  it('responses socket - a turn without a previous response is empty; one with it is checked', () => {
    assert.deepEqual(decodeSocketTurn({}), {});
    const previous = {
      id: 'resp_1',
      items: [{ type: 'message', role: 'user', content: [] }],
      chain: ['resp_0'],
      affinityKey: 'k',
    };
    assert.deepEqual(decodeSocketTurn({ previous }), { previous });
  });

  it('responses socket - a malformed previous response names the field', () => {
    assert.throws(() => decodeSocketTurn({ previous: { id: 1, items: [] } }), invalid('socket.previous.id', /string/));
    assert.throws(
      () => decodeSocketTurn({ previous: { id: 'r', items: [{}] } }),
      invalid('socket.previous.items[0].type', /string|required/),
    );
    assert.throws(
      () => decodeSocketTurn({ previous: { id: 'r', items: [], chain: [2] } }),
      invalid('socket.previous.chain[0]', /string/),
    );
  });
});
