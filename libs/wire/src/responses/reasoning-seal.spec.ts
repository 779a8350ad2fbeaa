import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { StreamEvent } from '@cortex/contracts';
import { ReasoningSeal } from './reasoning-seal.js';
import { decodeResponsesRequest } from './responses.decoder.js';
import { ResponsesAggregator } from './responses.encoder.js';

describe('reasoning seal', () => {
  const seal = new ReasoningSeal('shared secret');

  it('reasoning seal - what one replica seals another with the same secret opens', () => {
    const sealed = seal.seal('The user wants a greeting.');
    assert.match(sealed, /^cortex\.r1\./);
    assert.doesNotMatch(sealed, /greeting/);
    assert.equal(new ReasoningSeal('shared secret').open(sealed), 'The user wants a greeting.');
    // A fresh IV each time: the same text never seals to the same blob.
    assert.notEqual(seal.seal('same'), seal.seal('same'));
  });

  it("reasoning seal - another key, an altered blob or another provider's blob opens to nothing", () => {
    const sealed = seal.seal('secret reasoning');
    assert.equal(new ReasoningSeal('other secret').open(sealed), undefined);
    const raw = Buffer.from(sealed.slice('cortex.r1.'.length), 'base64url');
    raw[raw.length - 1] = (raw[raw.length - 1] ?? 0) ^ 1;
    assert.equal(seal.open(`cortex.r1.${raw.toString('base64url')}`), undefined);
    assert.equal(seal.open('cortex.r1.AAAA'), undefined);
    assert.equal(seal.open('gAAAAABoOpenAIEncryptedBlob'), undefined);
  });

  it('reasoning seal - include reasoning.encrypted_content puts the sealed reasoning on the reasoning item', () => {
    const decoded = decodeResponsesRequest({
      model: 'm',
      input: 'hi',
      store: false,
      include: ['reasoning.encrypted_content'],
    });
    assert.equal(decoded.encryptedReasoning, true);
    assert.equal(decodeResponsesRequest({ model: 'm', input: 'hi' }).encryptedReasoning, false);
    const aggregator = new ResponsesAggregator({
      id: 'resp_1',
      createdAt: 1,
      echo: decoded.echo,
      sealReasoning: (text) => seal.seal(text),
    });
    const events = [
      { type: 'start', runId: 'r', workerId: 'w', model: 'm', promptTokens: 1 },
      { type: 'reasoning', text: 'Think ' },
      { type: 'reasoning', text: 'first.' },
      { type: 'text', text: 'Hi.' },
      {
        type: 'finish',
        reason: 'stop',
        usage: { promptTokens: 1, cachedPromptTokens: 0, completionTokens: 3, reasoningTokens: 2 },
        timings: { ttftMs: 1, promptMs: 1, decodeTokensPerSecond: 1, durationMs: 1, queueMs: 0 },
      },
    ].map((event, seq) => ({ seq, ...event }) as StreamEvent);
    for (const event of events) aggregator.add(event);
    const item = aggregator.resource().output.find((output) => output.type === 'reasoning');
    assert.ok(
      item?.type === 'reasoning' && item.encrypted_content !== undefined,
      'the reasoning item carries encrypted_content',
    );
    assert.equal(seal.open(item.encrypted_content), 'Think first.');
    assert.equal(item.content?.[0]?.text, 'Think first.');
  });
});
