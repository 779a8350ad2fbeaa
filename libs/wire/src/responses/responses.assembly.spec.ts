import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError } from '@cortex/contracts';
import {
  continuesStoredState,
  namesStoredState,
  newResponseId,
  ResponsesAssembly,
  type ResponsesContext,
} from './responses.assembly.js';
import { decodeResponsesRequest } from './responses.decoder.js';

const empty: ResponsesContext = { history: [], chain: [], referenced: new Map() };
const body = (extra: Record<string, unknown> = {}) => ({ model: 'm', input: 'Hi', ...extra });

describe('responses assembly', () => {
  it('responses assembly - a body continues stored state when it names a previous response, a conversation or an item reference', () => {
    assert.equal(continuesStoredState(decodeResponsesRequest(body())), false);
    assert.equal(continuesStoredState(decodeResponsesRequest(body({ store: false }))), false);
    assert.equal(continuesStoredState(decodeResponsesRequest(body({ previous_response_id: 'resp_1' }))), true);
    assert.equal(continuesStoredState(decodeResponsesRequest(body({ conversation: 'conv_1' }))), true);
    assert.equal(
      continuesStoredState(decodeResponsesRequest(body({ input: [{ type: 'item_reference', id: 'msg_1' }] }))),
      true,
    );
    assert.equal(
      continuesStoredState(decodeResponsesRequest(body({ input: [{ id: 'msg_1' }] }))),
      true,
      'an item with only an id is a reference',
    );
  });

  it(
    'responses assembly - the raw body names stored state by ' +
      'previous_response_id or conversation; anything else is decoded to tell',
    () => {
      assert.equal(namesStoredState(body({ previous_response_id: 'resp_1' })), true);
      assert.equal(namesStoredState(body({ conversation: { id: 'conv_1' } })), true);
      assert.equal(namesStoredState(body({ previous_response_id: null })), false);
      assert.equal(namesStoredState(body({ input: [{ type: 'item_reference', id: 'msg_1' }] })), false);
      assert.equal(namesStoredState('not an object'), false);
    },
  );

  it('responses assembly - a body that continues nothing: the messages, input ids from the response id, and the state', () => {
    const assembly = new ResponsesAssembly(undefined);
    const id = newResponseId();
    assert.match(id, /^resp_[0-9a-f]{32}$/);
    const { request, state } = assembly.assemble(
      decodeResponsesRequest(body({ instructions: 'Be brief.' })),
      id,
      empty,
    );
    assert.deepEqual(
      request.messages.map((m) => m.role),
      ['system', 'user'],
    );
    assert.equal(state.responseId, id);
    assert.equal(state.store, true);
    assert.deepEqual(state.chain, []);
    assert.ok(state.input[0]?.id, 'each input item gets an id');
    assert.equal(state.history, undefined, 'only a WebSocket turn keeps its history in the state');
  });

  it('responses assembly - affinity: a stored response starts its own, an unstored one none, a gathered key wins', () => {
    const assembly = new ResponsesAssembly(undefined);
    const stored = assembly.assemble(decodeResponsesRequest(body()), 'resp_a', empty);
    assert.equal(stored.request.affinityKey, stored.state.affinityKey);
    assert.match(stored.request.affinityKey ?? '', /resp_a/);
    assert.equal(
      assembly.assemble(decodeResponsesRequest(body({ store: false })), 'resp_b', empty).request.affinityKey,
      undefined,
    );
    assert.equal(
      assembly.assemble(decodeResponsesRequest(body({ store: false })), 'resp_c', empty, true).request.affinityKey !==
        undefined,
      true,
      'a WebSocket turn can be continued on its socket',
    );
    assert.equal(
      assembly.assemble(decodeResponsesRequest(body()), 'resp_d', { ...empty, affinity: 'session-1' }).request
        .affinityKey,
      'session-1',
    );
  });

  it('responses assembly - a tool result answers a call before it; one that answers nothing is refused naming the field', () => {
    const assembly = new ResponsesAssembly(undefined);
    const output = { type: 'function_call_output', call_id: 'call_1', output: '{}' };
    assert.throws(
      () => assembly.assemble(decodeResponsesRequest(body({ input: [output] })), 'resp_a', empty),
      (error: unknown) => error instanceof CortexError && error.extra.param === 'input[0].call_id',
    );
    const call = { type: 'function_call', call_id: 'call_1', name: 'f', arguments: '{}' };
    const fromHistory = assembly.assemble(decodeResponsesRequest(body({ input: [output] })), 'resp_b', {
      ...empty,
      history: decodeResponsesRequest(body({ input: [call] })).input,
    });
    assert.equal(fromHistory.state.input.length, 1);
  });

  it("responses assembly - reasoning sealed by this deployment's key is opened; a compaction item sealed elsewhere is refused", () => {
    const assembly = new ResponsesAssembly('a-key');
    const sealed = assembly.seal?.seal('I thought about it.') ?? '';
    const reasoning = { type: 'reasoning', summary: [], encrypted_content: sealed };
    const { state } = assembly.assemble(
      decodeResponsesRequest(body({ input: [reasoning, { role: 'user', content: 'Go on.' }] })),
      'resp_a',
      empty,
    );
    const opened = state.input[0];
    assert.ok(opened?.type === 'reasoning');
    assert.deepEqual(opened.content, [{ type: 'reasoning_text', text: 'I thought about it.' }]);
    const compaction = { type: 'compaction', encrypted_content: 'not-ours' };
    assert.throws(
      () =>
        assembly.assemble(
          decodeResponsesRequest(body({ input: [compaction, { role: 'user', content: 'Go on.' }] })),
          'resp_b',
          empty,
        ),
      (error: unknown) => error instanceof CortexError && error.extra.param === 'input[0].encrypted_content',
    );
  });
});
