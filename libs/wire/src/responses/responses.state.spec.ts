import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError } from '@cortex/contracts';
import {
  decodeResponseResource,
  decodeResponsesItems,
  decodeResponsesState,
  decodeStoreCommand,
} from './responses.state.js';

function rejects(read: () => unknown, param: string): void {
  assert.throws(
    read,
    (error: Error) =>
      error instanceof CortexError &&
      error.code === 'invalid_request' &&
      error.extra.param === param &&
      error.message.startsWith(`${param}: `),
    param,
  );
}

const message = { type: 'message', id: 'in_1_0', role: 'user', content: [{ type: 'input_text', text: 'Hi.' }] };
const state = {
  responseId: 'resp_1',
  createdAt: 1_700_000_000,
  echo: { model: 'm', background: false },
  store: true,
  input: [message],
  chain: ['resp_0'],
  conversation: 'conv_1',
  conversationItems: 2,
  affinityKey: 'conv_1',
  sealReasoning: false,
  toolNamespaces: { lookup: 'crm' },
  history: [{ type: 'function_call_output', call_id: 'c', output: 'ok' }],
};
const resource = {
  id: 'resp_1',
  object: 'response',
  created_at: 1_700_000_000,
  completed_at: null,
  status: 'in_progress',
  incomplete_details: null,
  output: [],
  error: null,
  usage: null,
  model: 'm',
};

describe('responses state', () => {
  it('responses state - a good state passes whole; optional fields left out (or null) stay out', () => {
    assert.deepEqual(decodeResponsesState(state), state);
    const { responseId, createdAt, echo, store, input, chain } = state;
    const bare = { responseId, createdAt, echo, store, input, chain };
    assert.deepEqual(decodeResponsesState(bare), bare);
    assert.deepEqual(
      decodeResponsesState({ ...bare, conversation: null, affinityKey: null, toolNamespaces: null, history: null }),
      bare,
    );
  });

  it('responses state - each bad field is named by its path', () => {
    rejects(() => decodeResponsesState(undefined), 'state');
    rejects(() => decodeResponsesState([]), 'state');
    rejects(() => decodeResponsesState({ ...state, responseId: 7 }), 'state.responseId');
    rejects(() => decodeResponsesState({ ...state, createdAt: '1700000000' }), 'state.createdAt');
    rejects(() => decodeResponsesState({ ...state, echo: 'm' }), 'state.echo');
    rejects(() => decodeResponsesState({ ...state, store: 'yes' }), 'state.store');
    rejects(() => decodeResponsesState({ ...state, input: {} }), 'state.input');
    rejects(() => decodeResponsesState({ ...state, input: ['text'] }), 'state.input[0]');
    rejects(() => decodeResponsesState({ ...state, input: [message, { role: 'user' }] }), 'state.input[1].type');
    rejects(() => decodeResponsesState({ ...state, chain: undefined }), 'state.chain');
    rejects(() => decodeResponsesState({ ...state, chain: [1] }), 'state.chain[0]');
    rejects(() => decodeResponsesState({ ...state, conversation: 3 }), 'state.conversation');
    rejects(() => decodeResponsesState({ ...state, conversationItems: -1 }), 'state.conversationItems');
    rejects(() => decodeResponsesState({ ...state, affinityKey: {} }), 'state.affinityKey');
    rejects(() => decodeResponsesState({ ...state, sealReasoning: 1 }), 'state.sealReasoning');
    rejects(() => decodeResponsesState({ ...state, toolNamespaces: ['crm'] }), 'state.toolNamespaces');
    rejects(() => decodeResponsesState({ ...state, toolNamespaces: { lookup: 1 } }), 'state.toolNamespaces.lookup');
    rejects(() => decodeResponsesState({ ...state, history: 'earlier' }), 'state.history');
    rejects(() => decodeResponsesState({ ...state, history: [{ type: null }] }), 'state.history[0].type');
    // The same item reader serves the compaction plan's kept items.
    assert.deepEqual(decodeResponsesItems([message], 'recent'), [message]);
    rejects(() => decodeResponsesItems([message, {}], 'recent'), 'recent[1].type');
  });

  it('responses state - a resource: its own fields are checked, the echo it carries passes as it came', () => {
    assert.deepEqual(decodeResponseResource(resource), resource);
    rejects(() => decodeResponseResource({ ...resource, id: undefined }), 'resource.id');
    rejects(() => decodeResponseResource({ ...resource, object: 'list' }), 'resource.object');
    rejects(() => decodeResponseResource({ ...resource, created_at: null }), 'resource.created_at');
    rejects(() => decodeResponseResource({ ...resource, completed_at: 'now' }), 'resource.completed_at');
    rejects(() => decodeResponseResource({ ...resource, status: 'done' }), 'resource.status');
    rejects(
      () => decodeResponseResource({ ...resource, incomplete_details: {} }),
      'resource.incomplete_details.reason',
    );
    rejects(() => decodeResponseResource({ ...resource, output: [{}] }), 'resource.output[0].type');
    rejects(() => decodeResponseResource({ ...resource, error: { code: 'internal' } }), 'resource.error.message');
    rejects(() => decodeResponseResource({ ...resource, usage: 5 }), 'resource.usage');
  });

  it('responses state - a store command names the part at fault', () => {
    assert.deepEqual(decodeStoreCommand({ state, resource }), { state, resource });
    rejects(() => decodeStoreCommand('state'), 'payload');
    rejects(() => decodeStoreCommand({ resource }), 'state');
    rejects(() => decodeStoreCommand({ state }), 'resource');
    rejects(() => decodeStoreCommand({ state: { ...state, store: 'yes' }, resource }), 'state.store');
  });
});
