import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { fixtureModel } from '@cortex/fixtures';
import { postJson, postSse, startStack, FIXTURE_CATALOGUE, type TestStack } from '@cortex/testing';

const chat = fixtureModel('cortex-chat');
const reasoning = fixtureModel('cortex-reasoning');
const tools = fixtureModel('cortex-tools');
const user = [{ role: 'user' as const, content: 'Say hello.' }];
const weatherTool = {
  name: 'get_weather',
  description: 'Current weather',
  input_schema: { type: 'object' as const, properties: { city: { type: 'string' } } },
};

describe('anthropic messages e2e', () => {
  let stack: TestStack;
  let client: Anthropic;

  before(async () => {
    stack = await startStack({
      models: [
        ...FIXTURE_CATALOGUE.map((m) => ({ ...m, context_size: 1024 })),
        { id: 'cortex-loop', file: 'fixture:cortex-loop', context_size: 1024 },
      ],
    });
    client = new Anthropic({ baseURL: stack.baseUrl, apiKey: 'unused', maxRetries: 0 });
  });

  after(async () => {
    await stack?.stop();
  });

  it('anthropic e2e - messages.create returns the fixture sentence with usage and end_turn', async () => {
    const message = await client.messages.create({ model: 'cortex-chat', max_tokens: 64, messages: user });
    assert.equal(message.type, 'message');
    assert.equal(message.role, 'assistant');
    assert.deepEqual(
      message.content.map((b) => b.type),
      ['text'],
    );
    assert.equal((message.content[0] as Anthropic.TextBlock).text, chat.expected.text);
    assert.equal(message.stop_reason, 'end_turn');
    assert.equal(message.usage.output_tokens, chat.completionTokens);
    assert.ok(message.usage.input_tokens > 0);
  });

  it('anthropic e2e - messages.stream() is accepted by the SDK and yields text deltas', async () => {
    const stream = client.messages.stream({ model: 'cortex-chat', max_tokens: 64, messages: user });
    const deltas: string[] = [];
    stream.on('text', (delta) => deltas.push(delta));
    const message = await stream.finalMessage();
    assert.equal((message.content[0] as Anthropic.TextBlock).text, chat.expected.text);
    assert.equal(deltas.join(''), chat.expected.text);
    assert.equal(message.stop_reason, 'end_turn');
    assert.equal(message.usage.output_tokens, chat.completionTokens);
  });

  it('anthropic e2e - raw SSE uses named events from message_start to message_stop', async () => {
    const { status, messages } = await postSse(`${stack.baseUrl}/v1/messages`, {
      model: 'cortex-chat',
      max_tokens: 64,
      stream: true,
      messages: user,
    });
    assert.equal(status, 200);
    const events = messages.map((m) => m.event);
    assert.equal(events[0], 'message_start');
    assert.equal(events.at(-1), 'message_stop');
    assert.ok(
      events.includes('content_block_start') &&
        events.includes('content_block_delta') &&
        events.includes('content_block_stop'),
    );
    for (const m of messages) assert.equal((JSON.parse(m.data) as { type: string }).type, m.event);
    const start = JSON.parse(messages[0]?.data ?? '{}') as {
      message: { content: unknown[]; usage: { input_tokens: number } };
    };
    assert.deepEqual(start.message.content, []);
    assert.ok(start.message.usage.input_tokens >= 0);
  });

  it('anthropic e2e - thinking blocks appear only when thinking is enabled', async () => {
    const withThinking = await client.messages
      .stream({
        model: 'cortex-reasoning',
        max_tokens: 64,
        thinking: { type: 'enabled', budget_tokens: 1024 },
        messages: user,
      })
      .finalMessage();
    assert.deepEqual(
      withThinking.content.map((b) => b.type),
      ['thinking', 'text'],
    );
    assert.equal((withThinking.content[0] as Anthropic.ThinkingBlock).thinking, reasoning.expected.reasoning);
    assert.equal((withThinking.content[1] as Anthropic.TextBlock).text, reasoning.expected.text);

    const without = await client.messages.create({ model: 'cortex-reasoning', max_tokens: 64, messages: user });
    assert.deepEqual(
      without.content.map((b) => b.type),
      ['text'],
    );
    assert.equal((without.content[0] as Anthropic.TextBlock).text, reasoning.expected.text);
  });

  it('anthropic e2e - tool_use round trip, streamed and not', async () => {
    const first = await client.messages.create({
      model: 'cortex-tools',
      max_tokens: 128,
      tools: [weatherTool],
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
    });
    assert.equal(first.stop_reason, 'tool_use');
    const call = first.content.find((b): b is Anthropic.ToolUseBlock => b.type === 'tool_use');
    assert.ok(call);
    assert.equal(call.name, 'get_weather');
    assert.deepEqual(call.input, tools.expected.toolCall?.arguments);

    const streamed = await client.messages
      .stream({
        model: 'cortex-tools',
        max_tokens: 128,
        tools: [weatherTool],
        messages: [{ role: 'user', content: 'Weather in Paris?' }],
      })
      .finalMessage();
    assert.equal(streamed.stop_reason, 'tool_use');
    assert.deepEqual((streamed.content.find((b) => b.type === 'tool_use') as Anthropic.ToolUseBlock).input, {
      city: 'Paris',
    });

    const second = await client.messages.create({
      model: 'cortex-tools',
      max_tokens: 128,
      tools: [weatherTool],
      messages: [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: first.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: '{"temp_c": 21}' }] },
      ],
    });
    assert.equal(second.stop_reason, 'end_turn');
    assert.equal((second.content[0] as Anthropic.TextBlock).text, tools.expected.afterToolResult?.text);

    // tool_choice any: the same turn must be a tool call instead, streamed through the SDK's helper.
    const forced = await client.messages
      .stream({
        model: 'cortex-tools',
        max_tokens: 128,
        tools: [weatherTool],
        tool_choice: { type: 'any', disable_parallel_tool_use: true },
        messages: [
          { role: 'user', content: 'Weather in Paris?' },
          { role: 'assistant', content: first.content },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: '{"temp_c": 21}' }] },
        ],
      })
      .finalMessage();
    assert.equal(forced.stop_reason, 'tool_use');
    assert.deepEqual(
      forced.content.map((b) => b.type),
      ['tool_use'],
    );
    assert.equal((forced.content[0] as Anthropic.ToolUseBlock).name, 'get_weather');
  });

  it('anthropic e2e - stop_sequences end with stop_sequence and the matched text', async () => {
    const message = await client.messages.create({
      model: 'cortex-loop',
      max_tokens: 50,
      stop_sequences: ['we go.'],
      messages: user,
    });
    assert.equal(message.stop_reason, 'stop_sequence');
    assert.equal(message.stop_sequence, 'we go.');
    assert.equal((message.content[0] as Anthropic.TextBlock).text, 'Round and round ');
    const capped = await client.messages.create({ model: 'cortex-loop', max_tokens: 4, messages: user });
    assert.equal(capped.stop_reason, 'max_tokens');
    assert.equal(capped.usage.output_tokens, 4);
  });

  it('anthropic e2e - countTokens uses the real tokenizer and template', async () => {
    const counted = await client.messages.countTokens({ model: 'cortex-chat', messages: user });
    const created = await client.messages.create({ model: 'cortex-chat', max_tokens: 8, messages: user });
    assert.equal(counted.input_tokens, created.usage.input_tokens + (created.usage.cache_read_input_tokens ?? 0));
    const longer = await client.messages.countTokens({
      model: 'cortex-chat',
      messages: [{ role: 'user', content: 'Say hello, and then say it once more.' }],
    });
    assert.ok(longer.input_tokens > counted.input_tokens);
  });

  it('anthropic e2e - errors come back in Anthropic shape', async () => {
    await assert.rejects(
      client.messages.create({ model: 'no-such-model', max_tokens: 8, messages: user }),
      (error: unknown) => {
        assert.ok(error instanceof Anthropic.NotFoundError);
        assert.equal((error.error as { type: string; error: { type: string } }).error.type, 'not_found_error');
        return true;
      },
    );
    const response = await postJson(
      `${stack.baseUrl}/v1/messages`,
      { model: 'cortex-chat', messages: user },
      { 'x-api-key': 'k', 'anthropic-version': '2023-06-01' },
    );
    assert.equal(response.status, 400);
    const body = (await response.json()) as { type: string; error: { type: string; message: string } };
    assert.equal(body.type, 'error');
    assert.equal(body.error.type, 'invalid_request_error');
    assert.match(body.error.message, /max_tokens/);
  });
});
