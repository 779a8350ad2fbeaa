import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { postJson, startStack, type TestStack } from '@cortex/testing';

interface Entry {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: Array<{ token: string; logprob: number }>;
}

const WEATHER = {
  name: 'get_weather',
  description: 'The weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};
const ASK = 'What is the weather in Paris?';
const CALL = { id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' };

/** What each case asks a model in Chat Completions and in Responses, and the answer it gives. */
const CASES: Array<{ name: string; model: string; content: string; chat: object; responses: object }> = [
  {
    name: 'a reasoning model (its reasoning and </think> apart)',
    model: 'cortex-reasoning',
    content: 'Hello after thinking.',
    chat: { messages: [{ role: 'user', content: 'Hi.' }] },
    responses: { input: 'Hi.' },
  },
  {
    name: 'a tool-calling model that calls (its <tool_call> is not answer)',
    model: 'cortex-tools',
    content: '',
    chat: { messages: [{ role: 'user', content: ASK }], tools: [{ type: 'function', function: WEATHER }] },
    responses: { input: ASK, tools: [{ type: 'function', ...WEATHER }] },
  },
  {
    name: 'a tool-calling model answering after a tool result',
    model: 'cortex-tools',
    content: 'The weather tool has answered.',
    chat: {
      messages: [
        { role: 'user', content: ASK },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: CALL.id, type: 'function', function: { name: CALL.name, arguments: CALL.arguments } }],
        },
        { role: 'tool', tool_call_id: CALL.id, content: '{"temp": 20}' },
      ],
      tools: [{ type: 'function', function: WEATHER }],
    },
    responses: {
      input: [
        { role: 'user', content: ASK },
        { type: 'function_call', call_id: CALL.id, name: CALL.name, arguments: CALL.arguments },
        { type: 'function_call_output', call_id: CALL.id, output: '{"temp": 20}' },
      ],
      tools: [{ type: 'function', ...WEATHER }],
    },
  },
];

const dataLines = <T>(text: string): T[] =>
  text
    .split('\n')
    .filter((line) => line.startsWith('data: {'))
    .map((line) => JSON.parse(line.slice(6)) as T);

describe('logprobs e2e: only the answer tokens have entries', () => {
  let stack: TestStack;

  before(async () => {
    stack = await startStack({ config: { gateway: { stall_timeout_ms: 30_000 } } });
  });

  after(async () => {
    await stack?.stop();
  });

  /** The entries join to exactly the content; none is a marker's; each has its alternatives. */
  const check = (what: string, content: string, entries: Entry[]): void => {
    const tokens = entries.map((entry) => entry.token);
    assert.equal(tokens.join(''), content, `${what}: ${JSON.stringify(tokens)}`);
    for (const entry of entries) {
      assert.ok(!/<\/?think>|<\/?tool_call>/.test(entry.token), `${what}: ${entry.token}`);
      assert.ok(entry.logprob <= 0, what);
      assert.deepEqual(entry.bytes, [...Buffer.from(entry.token, 'utf8')], what);
      assert.equal(entry.top_logprobs.length, 2, what);
    }
  };

  for (const c of CASES) {
    it(`logprobs - ${c.name}: Chat Completions, streamed and not, join to exactly the content`, async () => {
      const body = { model: c.model, ...c.chat, temperature: 0, logprobs: true, top_logprobs: 2 };
      const whole = await postJson(`${stack.baseUrl}/v1/chat/completions`, body);
      const answer = (await whole.json()) as {
        choices: Array<{
          message: { content: string | null; tool_calls?: Array<{ function: { name: string } }> };
          logprobs: { content: Entry[] } | null;
        }>;
      };
      assert.equal(whole.status, 200, JSON.stringify(answer));
      const choice = answer.choices[0]!;
      assert.equal(choice.message.content ?? '', c.content);
      // The case that calls does call.
      if (c.content === '') assert.equal(choice.message.tool_calls?.[0]?.function.name, 'get_weather');
      check(`${c.model} chat`, c.content, choice.logprobs?.content ?? []);

      const streamed = await postJson(`${stack.baseUrl}/v1/chat/completions`, { ...body, stream: true });
      assert.equal(streamed.status, 200);
      const chunks = dataLines<{
        choices: Array<{ delta: { content?: string | null }; logprobs?: { content: Entry[] } | null }>;
      }>(await streamed.text());
      const content = chunks.map((chunk) => chunk.choices[0]?.delta.content ?? '').join('');
      assert.equal(content, c.content);
      check(
        `${c.model} chat stream`,
        content,
        chunks.flatMap((chunk) => chunk.choices[0]?.logprobs?.content ?? []),
      );
      // Each chunk's entries are its own delta.
      for (const chunk of chunks) {
        const entries = chunk.choices[0]?.logprobs?.content;
        if (entries) assert.equal(entries.map((e) => e.token).join(''), chunk.choices[0]?.delta.content ?? '');
      }
    });

    it(`logprobs - ${c.name}: Responses, streamed and not, join to exactly the output text`, async () => {
      const body = {
        model: c.model,
        ...c.responses,
        temperature: 0,
        include: ['message.output_text.logprobs'],
        top_logprobs: 2,
        store: false,
      };
      const created = await postJson(`${stack.baseUrl}/v1/responses`, body);
      const resource = (await created.json()) as {
        output: Array<{ type: string; content?: Array<{ type: string; text: string; logprobs: Entry[] }> }>;
      };
      assert.equal(created.status, 200, JSON.stringify(resource));
      const parts = resource.output
        .filter((item) => item.type === 'message')
        .flatMap((item) => item.content ?? [])
        .filter((part) => part.type === 'output_text');
      assert.equal(parts.map((part) => part.text).join(''), c.content);
      if (c.content === '') assert.ok(resource.output.some((item) => item.type === 'function_call'));
      check(
        `${c.model} responses`,
        c.content,
        parts.flatMap((part) => part.logprobs),
      );

      const streamed = await postJson(`${stack.baseUrl}/v1/responses`, { ...body, stream: true });
      assert.equal(streamed.status, 200);
      const events = dataLines<{ type: string; delta?: string; text?: string; logprobs?: Entry[] }>(
        await streamed.text(),
      );
      const deltas = events.filter((event) => event.type === 'response.output_text.delta');
      const text = deltas.map((event) => event.delta ?? '').join('');
      assert.equal(text, c.content);
      check(
        `${c.model} responses deltas`,
        text,
        deltas.flatMap((event) => event.logprobs ?? []),
      );
      for (const event of deltas) assert.equal((event.logprobs ?? []).map((e) => e.token).join(''), event.delta);
      const done = events.filter((event) => event.type === 'response.output_text.done');
      check(
        `${c.model} responses done`,
        done.map((event) => event.text ?? '').join(''),
        done.flatMap((event) => event.logprobs ?? []),
      );
      assert.equal(done.map((event) => event.text ?? '').join(''), c.content);
    });
  }
});
