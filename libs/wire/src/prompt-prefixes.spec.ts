import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { CanonicalMessage, CanonicalRequest } from '@cortex/contracts';
import { MAX_PROMPT_PREFIXES, promptPrefixes } from './prompt-prefixes.js';

const request = (messages: CanonicalMessage[], extra: Partial<CanonicalRequest> = {}): CanonicalRequest => ({
  model: 'm',
  messages,
  sampling: {},
  stream: false,
  ...extra,
});
const user = (content: string): CanonicalMessage => ({ role: 'user', content });
const assistant = (content: string): CanonicalMessage => ({ role: 'assistant', content });

describe('prompt prefixes', () => {
  it("prompt prefixes - one per message boundary, the whole prompt first; a follow-up holds its earlier request's whole prompt", () => {
    const first = promptPrefixes(request([{ role: 'system', content: 'Be brief.' }, user('Hi.')]));
    assert.equal(first.length, 2);
    const followUp = promptPrefixes(
      request([{ role: 'system', content: 'Be brief.' }, user('Hi.'), assistant('Hello.'), user('More.')]),
    );
    assert.equal(followUp.length, 4);
    assert.deepEqual(followUp.slice(2), first, "the shorter prefixes are the earlier request's");
    assert.notEqual(followUp[0], first[0]);
  });

  it('prompt prefixes - another model, other tools or template options, or another earlier message give other digests', () => {
    const base = promptPrefixes(request([user('Hi.')]))[0];
    const others = [
      request([user('Hi.')], { model: 'n' }),
      request([user('Hi.')], { tools: [{ name: 'f', description: 'd', parameters: { type: 'object' } }] }),
      request([user('Hi.')], { templateOptions: { enable_thinking: false } }),
      request([user('Hi!')]),
    ].map((r) => promptPrefixes(r)[0]);
    for (const other of others) assert.notEqual(other, base);
    assert.equal(new Set(others).size, others.length);
    // Sampling and streaming change nothing the model evaluates.
    assert.equal(promptPrefixes(request([user('Hi.')], { sampling: { temperature: 0.2 }, stream: true }))[0], base);
  });

  it(`prompt prefixes - at most ${MAX_PROMPT_PREFIXES}, the longest; none for a raw prompt or no messages`, () => {
    const long = Array.from({ length: 100 }, (_, i) => user(`turn ${i}`));
    const all = promptPrefixes(request(long));
    assert.equal(all.length, MAX_PROMPT_PREFIXES);
    assert.deepEqual(all.slice(1), promptPrefixes(request(long.slice(0, 99))).slice(0, MAX_PROMPT_PREFIXES - 1));
    assert.ok(all.every((digest) => /^[\w-]{22}$/.test(digest)));
    assert.deepEqual(promptPrefixes(request([])), []);
    assert.deepEqual(promptPrefixes(request([user('x')], { raw: { text: 'x' } })), []);
  });
});
