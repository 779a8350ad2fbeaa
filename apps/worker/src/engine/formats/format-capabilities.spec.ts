import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { FORMATS } from './families.js';
import { formatCapabilities } from './format-capabilities.js';

describe('format capabilities', () => {
  it('format capabilities - calls by the format; reasoning by its marker in the template or the vocabulary', () => {
    const hermes = FORMATS.hermes;
    const open = hermes.reasoning?.open ?? assert.fail('hermes reasons in a block');
    assert.deepEqual(formatCapabilities(hermes, '{{ messages }}'), { format: 'hermes', tools: true, reasoning: false });
    assert.equal(formatCapabilities(hermes, `{{ '${open}' }}`).reasoning, true, 'the template writes it');
    assert.equal(formatCapabilities(hermes, '', ['a', open]).reasoning, true, 'a token of the vocabulary');
    assert.equal(formatCapabilities(FORMATS['gpt-oss'], '').reasoning, true, "Harmony's channels always");
    assert.equal(formatCapabilities(FORMATS.plain, '').tools, false, 'plain text writes no calls');
  });
});
