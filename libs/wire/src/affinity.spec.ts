import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError } from '@cortex/contracts';
import { placementHint, sessionFromAnthropicUserId, sessionFromHeaders } from './affinity.js';
import { decodeChatRequest } from './openai/chat.decoder.js';
import { decodeMessagesRequest } from './anthropic/messages.decoder.js';
import { decodeResponsesRequest } from './responses/responses.decoder.js';

const names = ['x-claude-code-session-id', 'session-id', 'x-session-id'];

describe('affinity keys', () => {
  it('affinity - the first named session header wins; blank ones are skipped', () => {
    assert.equal(sessionFromHeaders({ 'x-session-id': 'b', 'x-claude-code-session-id': 'a' }, names), 'session:a');
    assert.equal(
      sessionFromHeaders({ 'x-claude-code-session-id': '  ', 'session-id': ['c', 'd'] }, names),
      'session:c',
    );
    assert.equal(sessionFromHeaders({ authorization: 'Bearer x' }, names), undefined);
  });

  it('affinity - Claude Code metadata.user_id gives its session, in both formats; a plain user id gives none', () => {
    const uuid = '57a121ec-f78c-48c3-a745-e3036a3ecc33';
    assert.equal(
      sessionFromAnthropicUserId(JSON.stringify({ device_id: 'x', account_uuid: '', session_id: uuid })),
      `session:${uuid}`,
    );
    assert.equal(sessionFromAnthropicUserId(`user_abc123_account__session_${uuid}`), `session:${uuid}`);
    assert.equal(sessionFromAnthropicUserId('user-42'), undefined);
    assert.equal(sessionFromAnthropicUserId('{not json'), undefined);
    assert.equal(sessionFromAnthropicUserId(undefined), undefined);
  });

  it('affinity - the header and the metadata name the same session with the same key', () => {
    const uuid = '5c0d2b1e-5a47-4d1b-9d7e-2f3f1d0b9a11';
    assert.equal(
      sessionFromHeaders({ 'x-claude-code-session-id': uuid }, names),
      sessionFromAnthropicUserId(JSON.stringify({ session_id: uuid })),
    );
  });

  it('affinity - each dialect decodes its conversation key into the canonical request', () => {
    const user = [{ role: 'user', content: 'Hi.' }];
    assert.equal(decodeChatRequest({ model: 'm', messages: user, prompt_cache_key: 'k1' }).affinityKey, 'pck:k1');
    assert.equal(decodeChatRequest({ model: 'm', messages: user }).affinityKey, undefined);
    assert.equal(
      decodeResponsesRequest({ model: 'm', input: 'Hi.', prompt_cache_key: 'k2' }).request.affinityKey,
      'pck:k2',
    );
    const anthropic = decodeMessagesRequest({
      model: 'm',
      max_tokens: 8,
      messages: user,
      metadata: { user_id: '{"session_id":"s-1"}' },
    });
    assert.equal(anthropic.request.affinityKey, 'session:s-1');
  });

  it(
    'affinity - prompt_cache_retention 24h and a cache_control ttl ' +
      'of 1h ask for the prompt to be kept longer; bad values are named',
    () => {
      const user = [{ role: 'user', content: 'Hi.' }];
      const named = (param: string) => (error: Error) =>
        error instanceof CortexError && error.code === 'invalid_request' && error.extra.param === param;
      assert.equal(
        decodeChatRequest({ model: 'm', messages: user, prompt_cache_retention: '24h' }).keepPromptLonger,
        true,
      );
      assert.equal(
        decodeChatRequest({ model: 'm', messages: user, prompt_cache_retention: 'in_memory' }).keepPromptLonger,
        undefined,
      );
      assert.equal(
        decodeChatRequest({ model: 'm', messages: user, prompt_cache_retention: null }).keepPromptLonger,
        undefined,
      );
      assert.throws(
        () => decodeChatRequest({ model: 'm', messages: user, prompt_cache_retention: '7d' }),
        named('prompt_cache_retention'),
      );
      assert.equal(
        decodeResponsesRequest({ model: 'm', input: 'Hi.', prompt_cache_retention: '24h' }).request.keepPromptLonger,
        true,
      );
      const messages = (extra: Record<string, unknown>) =>
        decodeMessagesRequest({ model: 'm', max_tokens: 8, messages: user, ...extra }).request.keepPromptLonger;
      const block = (ttl?: string) => ({
        type: 'text',
        text: 'Be brief.',
        cache_control: { type: 'ephemeral', ...(ttl && { ttl }) },
      });
      assert.equal(
        messages({ system: [block()] }),
        undefined,
        'the default five minutes is what the worker does anyway',
      );
      assert.equal(messages({ system: [block('5m')] }), undefined);
      assert.equal(messages({ system: [block('1h')] }), true);
      assert.equal(messages({ messages: [{ role: 'user', content: [block(), block('1h')] }] }), true);
      assert.equal(
        messages({
          tools: [{ name: 't', input_schema: { type: 'object' }, cache_control: { type: 'ephemeral', ttl: '1h' } }],
        }),
        true,
      );
      assert.throws(
        () => messages({ messages: [{ role: 'user', content: [block('2h')] }] }),
        named('messages[0].content[0].cache_control.ttl'),
      );
    },
  );

  it('affinity - a metadata.user_id that is not a string is a 400 naming it', () => {
    assert.throws(
      () =>
        decodeMessagesRequest({
          model: 'm',
          max_tokens: 8,
          messages: [{ role: 'user', content: 'Hi.' }],
          metadata: { user_id: 7 },
        }),
      (error: Error) =>
        error instanceof CortexError && error.code === 'invalid_request' && error.extra.param === 'metadata.user_id',
    );
  });

  it(
    'affinity - the placement hint names the model and key the Responses ' +
      'decoder will (the gateway asks the router with it while decoding)',
    () => {
      for (const body of [
        { model: 'm', input: 'Hi.', prompt_cache_key: 'k2' },
        { model: 'm', input: 'Hi.', previous_response_id: 'resp_1', prompt_cache_key: 'k3' },
      ]) {
        assert.deepEqual(placementHint(body, undefined), {
          model: 'm',
          affinity: decodeResponsesRequest(body).request.affinityKey,
        });
      }
      // A session header names the conversation before anything in the body (as the translator decides).
      assert.deepEqual(placementHint({ model: 'm', input: 'Hi.', prompt_cache_key: 'k2' }, 'session:h'), {
        model: 'm',
        affinity: 'session:h',
      });
    },
  );

  it('affinity - no placement hint when the translator keys the request by stored state, or the body names no model', () => {
    // Responses without a session or cache key are keyed by their chain (resp:<first id>) or conversation.
    assert.equal(placementHint({ model: 'm', input: 'Hi.' }, undefined), null);
    assert.equal(placementHint({ model: 'm', previous_response_id: 'resp_1' }, undefined), null);
    assert.equal(placementHint({ model: 'm', conversation: 'conv_1', input: 'Hi.' }, undefined), null);
    assert.deepEqual(placementHint({ model: 'm', previous_response_id: 'resp_1' }, 'session:s'), {
      model: 'm',
      affinity: 'session:s',
    });
    for (const body of [{ input: 'Hi.', prompt_cache_key: 'k' }, { model: '' }, { model: 7 }, [], null, 'text'])
      assert.equal(placementHint(body, 'session:s'), null);
  });
});
