import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, streamText } from 'ai';
import { fixtureModel } from '@cortex/fixtures';
import { OpenResponsesSchema, startStack, type TestStack } from '@cortex/testing';

const reasoning = fixtureModel('cortex-reasoning');
const thought = reasoning.expected.reasoning ?? assert.fail('cortex-reasoning has expected reasoning');

/** Consecutive repeats of a name folded into one: the order of events, whatever the delta chunking. */
const runs = (names: string[]) => names.filter((name, i) => name !== names[i - 1]);
const deltaCount = (events: Array<{ type: string }>) =>
  events.filter((e) => e.type === 'response.reasoning_summary_text.delta').length;

describe('responses reasoning summaries e2e', () => {
  let stack: TestStack;
  let client: OpenAI;
  const schema = new OpenResponsesSchema();

  before(async () => {
    stack = await startStack({
      models: [{ id: 'cortex-reasoning', file: 'fixture:cortex-reasoning', context_size: 1024, slots: 2 }],
    });
    client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
  });

  after(async () => {
    await stack?.stop();
  });

  it('responses reasoning e2e - a streamed summary request: summary events in OpenAI order, valid against the spec', async () => {
    const stream = await client.responses.create({
      model: 'cortex-reasoning',
      input: 'Say hello.',
      reasoning: { summary: 'auto' },
      stream: true,
    });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const event of stream) events.push(event);

    assert.deepEqual(runs(events.map((e) => e.type)), [
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.reasoning_summary_part.added',
      'response.reasoning_summary_text.delta',
      'response.reasoning_summary_text.done',
      'response.reasoning_summary_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    assert.deepEqual(
      events.map((e) => e.sequence_number),
      events.map((_, i) => i),
    );
    for (const event of events) assert.equal(schema.checkEvent(event), null, event.type);

    const added = events[2];
    assert.ok(added?.type === 'response.output_item.added' && added.item.type === 'reasoning');
    const ref = { item_id: added.item.id, output_index: 0, summary_index: 0 };
    type SummaryEvent = Extract<OpenAI.Responses.ResponseStreamEvent, { summary_index: number }>;
    const summaryEvents = events.filter((e): e is SummaryEvent => e.type.startsWith('response.reasoning_summary_'));
    assert.equal(summaryEvents.length, deltaCount(events) + 3);
    for (const event of summaryEvents)
      assert.deepEqual(
        { item_id: event.item_id, output_index: event.output_index, summary_index: event.summary_index },
        ref,
        event.type,
      );
    const deltas = summaryEvents.flatMap((e) => (e.type === 'response.reasoning_summary_text.delta' ? [e.delta] : []));
    assert.equal(deltas.join(''), thought);
    const done = summaryEvents.find((e) => e.type === 'response.reasoning_summary_text.done');
    assert.equal(done?.type === 'response.reasoning_summary_text.done' && done.text, thought);

    const completed = events.at(-1);
    assert.ok(completed?.type === 'response.completed');
    assert.deepEqual(completed.response.output[0], {
      type: 'reasoning',
      id: added.item.id,
      summary: [{ type: 'summary_text', text: thought }],
    });
    assert.deepEqual(completed.response.reasoning, { effort: null, summary: 'auto' });
    const { output_text: _text, ...resource } = completed.response as unknown as Record<string, unknown>;
    assert.equal(schema.check('ResponseResource', resource), null);
  });

  it('responses reasoning e2e - non-streamed and stored responses keep the summary; a follow-up via previous_response_id still works', async () => {
    const first = await client.responses.create({
      model: 'cortex-reasoning',
      input: 'Say hello.',
      reasoning: { summary: 'detailed' },
    });
    const summaryItem = {
      type: 'reasoning',
      id: first.output[0]?.id,
      summary: [{ type: 'summary_text', text: thought }],
    };
    assert.deepEqual(first.output[0], summaryItem);
    assert.equal(first.output_text, reasoning.expected.text);
    assert.deepEqual((await client.responses.retrieve(first.id)).output[0], summaryItem);

    const next = await client.responses.create({
      model: 'cortex-reasoning',
      previous_response_id: first.id,
      input: 'Again.',
      reasoning: { summary: 'auto' },
    });
    assert.equal(next.status, 'completed');
    assert.equal(next.previous_response_id, first.id);
    assert.equal(next.output_text, reasoning.expected.text);

    // The chained prompt is the conversation sent by hand. (The worker renders no earlier turn's reasoning
    // into the prompt, so the count cannot tell whether the summary was read back; the wire spec checks that.)
    const byHand = await client.responses.create({
      model: 'cortex-reasoning',
      store: false,
      input: [
        { role: 'user', content: 'Say hello.' },
        { type: 'reasoning', id: 'rs_by_hand', summary: [{ type: 'summary_text', text: thought }] },
        { role: 'assistant', content: reasoning.expected.text },
        { role: 'user', content: 'Again.' },
      ],
    });
    assert.equal(next.usage?.input_tokens, byHand.usage?.input_tokens);
  });

  it('responses reasoning e2e - without a summary request the reasoning stays reasoning_text content', async () => {
    const response = await client.responses.create({ model: 'cortex-reasoning', input: 'Say hello.' });
    const item = response.output[0];
    assert.ok(item?.type === 'reasoning');
    assert.deepEqual(item.summary, []);
    assert.deepEqual(item.content, [{ type: 'reasoning_text', text: thought }]);
  });

  it('responses reasoning e2e - the AI SDK reads reasoningText from the summary, streamed and not', async () => {
    const sent: Array<{ input?: unknown[] }> = [];
    const record: typeof fetch = (url, init) => {
      if (typeof init?.body === 'string') sent.push(JSON.parse(init.body) as { input?: unknown[] });
      return fetch(url, init);
    };
    const openai = createOpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', fetch: record });
    // The AI SDK sends `reasoning` only for model ids it knows to reason; forceReasoning marks a local one.
    const providerOptions = { openai: { reasoningSummary: 'auto', forceReasoning: true } };
    const generated = await generateText({
      model: openai.responses('cortex-reasoning'),
      prompt: 'Say hello.',
      providerOptions,
      maxRetries: 0,
    });
    assert.equal(generated.reasoningText, thought);
    assert.equal(generated.text, reasoning.expected.text);

    // The next turn sends the reasoning back (as an item_reference to the stored item) with the history.
    const followUp = await generateText({
      model: openai.responses('cortex-reasoning'),
      messages: [
        { role: 'user', content: 'Say hello.' },
        ...generated.response.messages,
        { role: 'user', content: 'Again.' },
      ],
      providerOptions,
      maxRetries: 0,
    });
    const reasoningId = generated.reasoning[0]?.providerMetadata?.openai?.itemId;
    assert.match(String(reasoningId), /^rs_/);
    assert.ok(
      sent
        .at(-1)
        ?.input?.some((item) => JSON.stringify(item) === JSON.stringify({ type: 'item_reference', id: reasoningId })),
    );
    assert.equal(followUp.reasoningText, thought);
    assert.equal(followUp.text, reasoning.expected.text);

    const streamed = streamText({
      model: openai.responses('cortex-reasoning'),
      prompt: 'Say hello.',
      providerOptions,
      maxRetries: 0,
    });
    assert.equal(await streamed.reasoningText, thought);
    assert.equal(await streamed.text, reasoning.expected.text);
  });
});
