import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError } from '@cortex/contracts';
import { ReasoningSeal } from './reasoning-seal.js';
import {
  COMPACTION_PREFIX,
  CompactionSeal,
  compactCreateBody,
  compactionItem,
  compactResource,
  splitForCompaction,
} from './responses.compaction.js';
import { decodeResponsesInput, itemsToMessages } from './responses.items.js';

const usage = { promptTokens: 10, cachedPromptTokens: 0, completionTokens: 4, reasoningTokens: 0 };

describe('responses compaction', () => {
  it('responses compaction - sealed with a key, opened only with that key; readable without one', () => {
    const sealed = new CompactionSeal('secret').encode('The user plans a picnic.');
    assert.match(sealed, /^cortex\.c1\./);
    assert.doesNotMatch(sealed, /picnic/);
    assert.equal(new CompactionSeal('secret').open(sealed), 'The user plans a picnic.');
    assert.equal(new CompactionSeal('other').open(sealed), undefined);
    assert.equal(new CompactionSeal().open(sealed), undefined);
    // Bound to compaction: reasoning sealed under the same key is not a summary.
    assert.equal(new CompactionSeal('secret').open(new ReasoningSeal('secret').seal('thoughts')), undefined);
    const plain = new CompactionSeal().encode('Picnic.');
    assert.match(plain, /^cortex\.c0\./);
    assert.equal(new CompactionSeal('secret').open(plain), 'Picnic.');
  });

  it('responses compaction - the latest user message and what follows stay; the rest is summarised', () => {
    const items = decodeResponsesInput([
      { role: 'user', content: 'a' },
      { role: 'assistant', content: 'b' },
      { role: 'user', content: 'c' },
      { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{}' },
      { type: 'function_call_output', call_id: 'c1', output: 'ok' },
    ]);
    const { older, recent } = splitForCompaction(items);
    assert.equal(older.length, 2);
    assert.deepEqual(
      recent.map((item) => item.type),
      ['message', 'function_call', 'function_call_output'],
    );
    assert.deepEqual(splitForCompaction(items.slice(0, 2)).older.length, 0);
  });

  it('responses compaction - the resource puts the summary first and gives kept items a status', () => {
    const summary = compactionItem('Sum.', new CompactionSeal());
    const [user] = decodeResponsesInput([{ id: 'in_1', role: 'user', content: 'next' }]);
    const resource = compactResource(user ? [user] : [], summary, usage);
    assert.equal(resource.object, 'response.compaction');
    assert.deepEqual(
      resource.output.map((item) => (item as { type: string }).type),
      ['compaction', 'message'],
    );
    assert.equal((resource.output[1] as { status: string }).status, 'completed');
    assert.equal(resource.usage.total_tokens, 14);
  });

  it('responses compaction - an unsealed compaction item renders as a user turn; an unreadable one is left out', () => {
    const readable = new CompactionSeal().encode('Sum.');
    const items = decodeResponsesInput([
      { type: 'compaction', encrypted_content: readable },
      { type: 'compaction_summary', encrypted_content: 'gAAAA' },
      { role: 'user', content: 'x' },
    ]);
    assert.deepEqual(itemsToMessages(items), [
      { role: 'user', content: `${COMPACTION_PREFIX}Sum.` },
      { role: 'user', content: 'x' },
    ]);
  });

  it('responses compaction - an empty summary (nothing was older) is a compaction item that later prompts leave out', () => {
    const resource = compactResource([], compactionItem('', new CompactionSeal()), usage);
    assert.deepEqual(
      resource.output.map((item) => (item as { type: string }).type),
      ['compaction'],
    );
    const content = (resource.output[0] as { encrypted_content: string }).encrypted_content;
    const items = decodeResponsesInput([
      { type: 'compaction', encrypted_content: content },
      { role: 'user', content: 'x' },
    ]);
    assert.deepEqual(itemsToMessages(items), [{ role: 'user', content: 'x' }]);
  });

  it('responses compaction - model is required and named', () => {
    assert.throws(
      () => compactCreateBody({ input: 'x' }),
      (error: unknown) => error instanceof CortexError && error.extra.param === 'model',
    );
    assert.deepEqual(compactCreateBody({ model: 'm', input: 'x', tools: [], parallel_tool_calls: true }), {
      model: 'm',
      input: 'x',
      previous_response_id: undefined,
      instructions: undefined,
      prompt_cache_key: undefined,
      store: false,
    });
  });
});
