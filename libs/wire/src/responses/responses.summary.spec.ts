/**
 * Reasoning summaries: a request with `reasoning.summary` gets the model's reasoning as the reasoning item's
 * summary, streamed with the `response.reasoning_summary_*` events OpenAI sends, and the official client
 * rebuilds the same item from them.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { withReplyServer } from '../testing/reply-server.js';
import { itemsToMessages } from './responses.items.js';
import {
  aggregate,
  encodeAll,
  encoderOptions,
  events,
  finish,
  requestBody,
  scripts,
  sseText,
  start,
} from './responses.fixtures.js';
import type { ResponseResource, ResponsesFrame } from './responses.types.js';

const summaryBody = (summary: string) => ({ ...requestBody, reasoning: { effort: 'low', summary } });
const summaryOptions = (family: 'openai' | 'openresponses' = 'openai', summary = 'auto') =>
  encoderOptions(family, summaryBody(summary));
const names = (frames: ResponsesFrame[]) => frames.map((frame) => frame.event);
const finalResource = (frames: ResponsesFrame[]): ResponseResource => {
  const data = frames.at(-1)?.data;
  assert.ok(data && 'response' in data, 'the last frame carries the resource');
  return data.response;
};

const summaryItem = (text: string, index = 0) => ({
  type: 'reasoning',
  id: `rs_test1_${index}`,
  summary: [{ type: 'summary_text', text }],
});

describe('responses codec - reasoning summaries', () => {
  it('responses codec - summary requested: the reasoning streams as summary part 0 of its item, exactly as OpenAI orders it', () => {
    const frames = encodeAll(scripts.reasoning, summaryOptions());
    assert.deepEqual(
      frames.slice(2, 9).map((frame) => frame.data),
      [
        {
          type: 'response.output_item.added',
          output_index: 0,
          item: { type: 'reasoning', id: 'rs_test1_0', summary: [] },
          sequence_number: 2,
        },
        {
          type: 'response.reasoning_summary_part.added',
          item_id: 'rs_test1_0',
          output_index: 0,
          summary_index: 0,
          part: { type: 'summary_text', text: '' },
          sequence_number: 3,
        },
        {
          type: 'response.reasoning_summary_text.delta',
          item_id: 'rs_test1_0',
          output_index: 0,
          summary_index: 0,
          delta: 'The user ',
          sequence_number: 4,
        },
        {
          type: 'response.reasoning_summary_text.delta',
          item_id: 'rs_test1_0',
          output_index: 0,
          summary_index: 0,
          delta: 'greets me.',
          sequence_number: 5,
        },
        {
          type: 'response.reasoning_summary_text.done',
          item_id: 'rs_test1_0',
          output_index: 0,
          summary_index: 0,
          text: 'The user greets me.',
          sequence_number: 6,
        },
        {
          type: 'response.reasoning_summary_part.done',
          item_id: 'rs_test1_0',
          output_index: 0,
          summary_index: 0,
          part: { type: 'summary_text', text: 'The user greets me.' },
          sequence_number: 7,
        },
        {
          type: 'response.output_item.done',
          output_index: 0,
          item: summaryItem('The user greets me.'),
          sequence_number: 8,
        },
      ],
    );
    // No reasoning_text content alongside: it would be the same text twice.
    assert.equal(
      frames.filter(
        (frame) => frame.event.startsWith('response.reasoning_text') || frame.event.startsWith('response.reasoning.'),
      ).length,
      0,
    );
    assert.deepEqual(names(frames).slice(9), [
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    frames.forEach((frame, i) => assert.equal(frame.data.sequence_number, i));
    const resource = finalResource(frames);
    assert.deepEqual(resource.output[0], summaryItem('The user greets me.'));
    assert.deepEqual(resource.reasoning, { effort: 'low', summary: 'auto' });
    // The summary events have one name in both families.
    assert.deepEqual(encodeAll(scripts.reasoning, summaryOptions('openresponses')), frames);
  });

  it('responses codec - concise and detailed summaries carry the same text: there is no separate summariser', () => {
    const auto = aggregate(scripts.reasoning, summaryOptions('openai', 'auto')).output;
    for (const summary of ['concise', 'detailed'])
      assert.deepEqual(aggregate(scripts.reasoning, summaryOptions('openai', summary)).output, auto, summary);
  });

  it('responses codec - without a summary request the reasoning stays reasoning_text content with an empty summary', () => {
    for (const body of [
      requestBody,
      { ...requestBody, reasoning: { effort: 'high' } },
      { ...requestBody, reasoning: { summary: null } },
    ]) {
      const output = aggregate(scripts.reasoning, encoderOptions('openai', body)).output;
      assert.deepEqual(
        output[0],
        {
          type: 'reasoning',
          id: 'rs_test1_0',
          summary: [],
          content: [{ type: 'reasoning_text', text: 'The user greets me.' }],
        },
        JSON.stringify(body),
      );
    }
  });

  it('responses codec - the non-streamed body carries the same summary items as the stream; each reasoning run is its own item', () => {
    const frames = encodeAll(scripts.toolCall, summaryOptions());
    const { output_text: _text, ...body } = aggregate(scripts.toolCall, summaryOptions());
    assert.deepEqual(body, finalResource(frames));
    assert.deepEqual(body.output[0], summaryItem('Need the forecast.'));

    // Reasoning after text opens a new reasoning item, whose summary index starts again at 0.
    const twice = events(
      start,
      { type: 'reasoning', text: 'First.' },
      { type: 'text', text: 'A' },
      { type: 'reasoning', text: 'Second.' },
      { type: 'text', text: 'B' },
      finish('stop'),
    );
    const again = encodeAll(twice, summaryOptions())
      .filter((frame) => frame.event === 'response.reasoning_summary_text.done')
      .map((frame) => frame.data);
    assert.deepEqual(
      again.map((data) => ('summary_index' in data ? [data.item_id, data.output_index, data.summary_index] : null)),
      [
        ['rs_test1_0', 0, 0],
        ['rs_test1_2', 2, 0],
      ],
    );
    assert.deepEqual(aggregate(twice, summaryOptions()).output[2], summaryItem('Second.', 2));
  });

  it('responses codec - an error mid-reasoning closes the summary part before the error frame', () => {
    const list = events(
      start,
      { type: 'reasoning', text: 'Half a tho' },
      { type: 'error', error: { code: 'worker_lost', message: 'the worker went away' } },
    );
    const frames = encodeAll(list, summaryOptions());
    assert.deepEqual(names(frames).slice(2), [
      'response.output_item.added',
      'response.reasoning_summary_part.added',
      'response.reasoning_summary_text.delta',
      'response.reasoning_summary_text.done',
      'response.reasoning_summary_part.done',
      'response.output_item.done',
      'error',
      'response.failed',
    ]);
    assert.deepEqual(finalResource(frames).output, [summaryItem('Half a tho')]);
  });

  it('responses codec - a stored summary-only reasoning item is read back as the turn reasoning', () => {
    const output = aggregate(scripts.reasoning, summaryOptions()).output;
    assert.deepEqual(
      itemsToMessages([{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hi' }] }, ...output]),
      [
        { role: 'user', content: 'Hi' },
        { role: 'assistant', content: 'Hi!', reasoning: 'The user greets me.' },
      ],
    );
  });

  it('responses codec - the openai client accumulates the summary from the stream and emits its summary events', async () => {
    const sse = sseText(encodeAll(scripts.reasoning, summaryOptions()));
    await withReplyServer(
      { sse },
      (base) => new OpenAI({ apiKey: 'test-key', baseURL: `${base}/v1`, maxRetries: 0 }),
      async (client, bodies) => {
        const deltas: string[] = [];
        const stream = client.responses.stream({ model: 'local-model', input: 'Hi', reasoning: { summary: 'auto' } });
        stream.on('response.reasoning_summary_text.delta', (event) => deltas.push(event.delta));
        const response = await stream.finalResponse();
        assert.deepEqual(deltas, ['The user ', 'greets me.']);
        assert.deepEqual(response.output[0], summaryItem('The user greets me.'));
        assert.equal(response.output_text, 'Hi!');
        assert.deepEqual((bodies[0] as { reasoning: unknown }).reasoning, { summary: 'auto' });
      },
    );
  });
});
