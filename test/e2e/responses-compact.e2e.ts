import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { fixtureModel } from '@cortex/fixtures';
import { BusClient } from '@cortex/bus';
import { decodeDecodedRequest, Subjects } from '@cortex/contracts';
import { COMPACTION_PREFIX, COMPACTION_PROMPT } from '@cortex/wire';
import {
  OpenResponsesSchema,
  postJson,
  startStack,
  watchBus,
  FIXTURE_CATALOGUE,
  type TestStack,
} from '@cortex/testing';

const chat = fixtureModel('cortex-chat');

type Item = Record<string, unknown>;

const user = (text: string): Item => ({ type: 'message', role: 'user', content: [{ type: 'input_text', text }] });
const assistant = (text: string): Item => ({
  type: 'message',
  role: 'assistant',
  content: [{ type: 'output_text', text, annotations: [] }],
});

describe('responses compact e2e', () => {
  let stack: TestStack;
  let client: OpenAI;
  let bus: BusClient;
  const schema = new OpenResponsesSchema();

  before(async () => {
    stack = await startStack({
      models: FIXTURE_CATALOGUE,
      config: { responses: { reasoning_key: 'compact e2e secret' } },
    });
    client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    bus = new BusClient(stack.nc, 10_000);
  });

  after(async () => {
    await stack?.stop();
  });

  /** The prompt a create body would run with, as the translator rebuilds it. */
  const messagesOf = async (body: unknown) =>
    (
      await bus.request(
        Subjects.translatorDecode,
        { dialect: 'openai.responses', body },
        { decode: decodeDecodedRequest },
      )
    ).request.messages;

  it('responses compact e2e - the model summarises the older items on a worker; the latest turn stays verbatim; the result continues', async () => {
    const history = [
      user('Plan a picnic.'),
      assistant('Bring bread.'),
      user('And drinks?'),
      assistant('Lemonade.'),
      user('Which park?'),
    ];
    const streams = await watchBus<{ type: string }>(stack.nc, Subjects.streamsAll);
    const compacted = await client.responses.compact({
      model: 'cortex-chat',
      input: history as never,
      instructions: 'Be brief.',
    });
    await streams.stop();
    assert.equal(schema.check('CompactResource', compacted), null);
    assert.equal(compacted.object, 'response.compaction');
    // A real generation ran: its events crossed the bus from a worker, and usage counts both sides.
    assert.ok(
      streams.messages.some((event) => event.type === 'finish'),
      'a worker streamed the summary',
    );
    assert.ok(compacted.usage.input_tokens > 0);
    assert.equal(compacted.usage.output_tokens, chat.completionTokens);
    const [summary, ...kept] = compacted.output as unknown as Item[];
    assert.equal(summary?.type, 'compaction');
    assert.match(String(summary?.encrypted_content), /^cortex\.c1\./, 'sealed with the reasoning key');
    assert.doesNotMatch(String(summary?.encrypted_content), /tiny/);
    assert.equal(kept.length, 1);
    assert.deepEqual((kept[0] as { content: unknown }).content, [{ type: 'input_text', text: 'Which park?' }]);

    // The compacted window is the base input of a new response, with the next turn appended.
    const input = [...(compacted.output as unknown as Item[]), user('Thanks.')];
    const messages = await messagesOf({ model: 'cortex-chat', input });
    assert.deepEqual(messages, [
      { role: 'user', content: COMPACTION_PREFIX + chat.expected.text },
      { role: 'user', content: 'Which park?' },
      { role: 'user', content: 'Thanks.' },
    ]);
    const next = await client.responses.create({ model: 'cortex-chat', input: input as never });
    assert.equal(next.status, 'completed');
    assert.equal(next.output_text, chat.expected.text);
    // Its input items show the compaction item as the client sent it: the opened summary stays in the store.
    const items = (await client.responses.inputItems.list(next.id)).data as unknown as Item[];
    const stored = items.find((item) => item.type === 'compaction');
    assert.deepEqual(Object.keys(stored ?? {}).sort(), ['encrypted_content', 'id', 'type']);
    // Stored with the item: a follow-up by previous_response_id rebuilds the summary from the store.
    const followUp = await messagesOf({ model: 'cortex-chat', previous_response_id: next.id, input: 'More.' });
    assert.equal(followUp[0]?.content, COMPACTION_PREFIX + chat.expected.text);
  });

  it('responses compact e2e - compacts a stored chain named by previous_response_id, then the new input', async () => {
    const first = await client.responses.create({ model: 'cortex-chat', input: 'Say hello.' });
    const compacted = await client.responses.compact({
      model: 'cortex-chat',
      previous_response_id: first.id,
      input: 'What next?',
    });
    assert.equal(schema.check('CompactResource', compacted), null);
    const types = (compacted.output as unknown as Item[]).map((item) => item.type);
    assert.deepEqual(types, ['compaction', 'message']);
    const again = await client.responses.compact({
      model: 'cortex-chat',
      input: [...(compacted.output as unknown as Item[]), assistant('Lunch.'), user('Then?')] as never,
    });
    // An earlier summary is itself summarised with the rest: one compaction item, then the latest turn.
    assert.deepEqual(
      (again.output as unknown as Item[]).map((item) => item.type),
      ['compaction', 'message'],
    );
  });

  it('responses compact e2e - a short window (nothing older than its latest user turn) still gets a compaction item, and no generation', async () => {
    const generates = await watchBus<unknown>(stack.nc, 'llm.worker.v1.*.generate');
    const compacted = await client.responses.compact({
      model: 'cortex-chat',
      input: [user('We launch on Tuesday.'), assistant('Understood.')] as never,
    });
    await generates.stop();
    assert.equal(generates.messages.length, 0, 'nothing to summarise, so no worker generated');
    assert.equal(schema.check('CompactResource', compacted), null);
    const output = compacted.output as unknown as Item[];
    assert.deepEqual(
      output.map((item) => item.type),
      ['compaction', 'message', 'message'],
    );
    assert.deepEqual((output[1] as { content: unknown }).content, [
      { type: 'input_text', text: 'We launch on Tuesday.' },
    ]);
    // The empty summary adds nothing to a later prompt: the kept turns follow as they were.
    const messages = await messagesOf({ model: 'cortex-chat', input: [...output, user('And then?')] });
    assert.deepEqual(messages, [
      { role: 'user', content: 'We launch on Tuesday.' },
      { role: 'assistant', content: 'Understood.' },
      { role: 'user', content: 'And then?' },
    ]);
  });

  it('responses compact e2e - the summarisation prompt is the older conversation followed by the documented prompt', async () => {
    const generates = await watchBus<{ request: { messages: Array<{ role: string; content: string }> } }>(
      stack.nc,
      'llm.worker.v1.*.generate',
    );
    await client.responses.compact({
      model: 'cortex-chat',
      input: [user('One.'), assistant('Two.'), user('Three.')] as never,
    });
    await generates.stop();
    const prompt = generates.messages.at(-1)?.request.messages;
    assert.deepEqual(prompt, [
      { role: 'user', content: 'One.' },
      { role: 'assistant', content: 'Two.' },
      { role: 'user', content: COMPACTION_PROMPT },
    ]);
  });

  it('responses compact e2e - a compaction item is accepted as input on its own, and as Codex names it', async () => {
    const compacted = await client.responses.compact({
      model: 'cortex-chat',
      input: [user('Hi.'), assistant('Hello.'), user('Bye.')] as never,
    });
    const item = (compacted.output as unknown as Item[])[0] as Item;
    for (const type of ['compaction', 'compaction_summary']) {
      const response = await client.responses.create({
        model: 'cortex-chat',
        input: [{ type, encrypted_content: item.encrypted_content }, user('Go on.')] as never,
      });
      assert.equal(response.output_text, chat.expected.text);
      const items = await client.responses.inputItems.list(response.id);
      assert.equal(items.data.find((entry) => entry.type === ('compaction' as never))?.type, 'compaction');
    }
  });

  it('responses compact e2e - bad bodies are 400s naming the field', async () => {
    const cases: Array<[unknown, string]> = [
      [{ input: 'Hi.' }, 'model'],
      [{ model: 'cortex-chat', input: [{ type: 'compaction' }] }, 'input[0].encrypted_content'],
    ];
    for (const [body, param] of cases) {
      const reply = await postJson(`${stack.baseUrl}/v1/responses/compact`, body);
      assert.equal(reply.status, 400);
      assert.equal(((await reply.json()) as { error: { param: string } }).error.param, param);
    }
    // Another provider's (or another key's) compaction cannot be read: said, not silently dropped.
    const foreign = await postJson(`${stack.baseUrl}/v1/responses`, {
      model: 'cortex-chat',
      input: [{ type: 'compaction', encrypted_content: 'gAAAAABpM0Yj' }, user('Hi.')],
    });
    assert.equal(foreign.status, 400);
    const error = ((await foreign.json()) as { error: { param: string; message: string } }).error;
    assert.equal(error.param, 'input[0].encrypted_content');
    assert.match(error.message, /compact/);
    const unknown = await postJson(`${stack.baseUrl}/v1/responses/compact`, {
      model: 'no-such-model',
      input: [user('a'), assistant('b'), user('c')],
    });
    assert.equal(unknown.status, 404);
  });
});
