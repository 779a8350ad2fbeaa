import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { jsonSchemaMismatch } from '@cortex/contracts';
import { fixtureModel } from '@cortex/fixtures';
import { postJson, startStack, type TestStack } from '@cortex/testing';

// cortex-tools always writes get_weather({"city": "Paris"}); these tools declare other fields. The
// call grammar switches on at the call's opening marker, so the arguments are written under the
// declared schema and validate against it, whatever the fixture would have written.

const tools = fixtureModel('cortex-tools');
const question = 'What is the weather like in San Francisco?';

/** The compliance suite's get_weather: a required `location`, where the fixture writes `city`. */
const location = {
  type: 'object',
  properties: { location: { type: 'string', description: 'The city and state' } },
  required: ['location'],
} as const;
/** More fields of more kinds, one of them an enum. */
const forecast = {
  type: 'object',
  properties: {
    place: { type: 'string' },
    days: { type: 'integer', minimum: 1, maximum: 7 },
    unit: { enum: ['celsius', 'fahrenheit'] },
  },
  required: ['place', 'days', 'unit'],
  additionalProperties: false,
} as const;
const schemas = [
  ['a required location', location],
  ['three required fields of three kinds', forecast],
] as const;

function assertValid(schema: object, args: string, where: string): void {
  assert.equal(jsonSchemaMismatch(schema as Record<string, unknown>, args), null, `${where}: ${args}`);
}

describe('tool calls e2e', () => {
  let stack: TestStack;
  let openai: OpenAI;
  let anthropic: Anthropic;

  before(async () => {
    stack = await startStack({
      models: [{ id: 'cortex-tools', file: 'fixture:cortex-tools', context_size: 1024, pinned: true }],
    });
    openai = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    anthropic = new Anthropic({ baseURL: stack.baseUrl, apiKey: 'unused', maxRetries: 0 });
  });

  after(async () => {
    await stack?.stop();
  });

  for (const [name, schema] of schemas) {
    it(`tool calls - chat completions, streamed and not: ${name} gets arguments that validate`, async () => {
      const body = {
        model: 'cortex-tools',
        messages: [{ role: 'user' as const, content: question }],
        tools: [{ type: 'function' as const, function: { name: 'get_weather', parameters: schema } }],
      };
      const reply = await openai.chat.completions.create(body);
      const call = reply.choices[0]?.message.tool_calls?.[0];
      assert.equal(reply.choices[0]?.finish_reason, 'tool_calls');
      assert.ok(call?.type === 'function');
      assert.equal(call.function.name, 'get_weather');
      assertValid(schema, call.function.arguments, 'chat');
      const streamed = await openai.chat.completions.stream(body).finalChatCompletion();
      const streamedCall = streamed.choices[0]?.message.tool_calls?.[0];
      assert.ok(streamedCall?.type === 'function');
      assertValid(schema, streamedCall.function.arguments, 'chat stream');
    });

    it(`tool calls - responses, streamed and not: ${name} gets arguments that validate`, async () => {
      for (const strict of [true, false]) {
        const body = {
          model: 'cortex-tools',
          input: question,
          tools: [{ type: 'function' as const, name: 'get_weather', parameters: schema, strict }],
        };
        const response = await openai.responses.create(body);
        const call = response.output.find((item) => item.type === 'function_call');
        assert.ok(call?.type === 'function_call', JSON.stringify(response.output));
        assertValid(schema, call.arguments, `responses strict ${strict}`);
        const streamed = await openai.responses.stream(body).finalResponse();
        const streamedCall = streamed.output.find((item) => item.type === 'function_call');
        assert.ok(streamedCall?.type === 'function_call');
        assertValid(schema, streamedCall.arguments, `responses stream strict ${strict}`);
      }
    });

    it(`tool calls - anthropic messages, streamed and not: ${name} gets input that validates`, async () => {
      const body = {
        model: 'cortex-tools',
        max_tokens: 256,
        messages: [{ role: 'user' as const, content: question }],
        tools: [{ name: 'get_weather', input_schema: schema as unknown as Anthropic.Tool.InputSchema }],
      };
      const message = await anthropic.messages.create(body);
      const use = message.content.find((block) => block.type === 'tool_use');
      assert.equal(message.stop_reason, 'tool_use');
      assert.ok(use?.type === 'tool_use');
      assertValid(schema, JSON.stringify(use.input), 'anthropic');
      const streamed = await anthropic.messages.stream(body).finalMessage();
      const streamedUse = streamed.content.find((block) => block.type === 'tool_use');
      assert.ok(streamedUse?.type === 'tool_use');
      assertValid(schema, JSON.stringify(streamedUse.input), 'anthropic stream');
    });
  }

  it('tool calls - a schema the fixture already fits is written as the fixture writes it', async () => {
    const city = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };
    const reply = await openai.chat.completions.create({
      model: 'cortex-tools',
      messages: [{ role: 'user', content: question }],
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: city } }],
    });
    const call = reply.choices[0]?.message.tool_calls?.[0];
    assert.ok(call?.type === 'function');
    assert.deepEqual(JSON.parse(call.function.arguments), tools.expected.toolCall?.arguments);
  });

  it('tool calls - arguments the grammar cannot hold to the schema: returned with a warning when the tool is not strict, invalid_output when it is', async () => {
    // The grammar holds types, names and enums, not patterns: the fixture writes "get_weather" here.
    const coded = { type: 'object', properties: { code: { type: 'string', pattern: '^[0-9]+$' } }, required: ['code'] };
    const tool = (strict: boolean) => ({ type: 'function' as const, name: 'get_weather', parameters: coded, strict });
    const loose = await openai.responses.create({ model: 'cortex-tools', input: question, tools: [tool(false)] });
    const call = loose.output.find((item) => item.type === 'function_call');
    assert.ok(call?.type === 'function_call', JSON.stringify(loose.output));
    assert.notEqual(jsonSchemaMismatch(coded, call.arguments), null, `returned as written: ${call.arguments}`);
    assert.match(
      stack.logs(),
      /tool call 0 \(get_weather\) do not match the tool's parameters schema.*returned as written/,
    );
    const strict = await postJson(`${stack.baseUrl}/v1/responses`, {
      model: 'cortex-tools',
      input: question,
      tools: [tool(true)],
    });
    const error = ((await strict.json()) as { error: { code: string; message: string } }).error;
    assert.equal(strict.status, 502);
    assert.equal(error.code, 'invalid_output');
  });

  it('tool calls - a tool result that answers no earlier call is a 400 naming its id, in each dialect', async () => {
    const cases: Array<{ path: string; body: unknown; param: string; type: string }> = [
      {
        path: '/v1/chat/completions',
        body: {
          model: 'cortex-tools',
          messages: [
            { role: 'user', content: question },
            { role: 'tool', tool_call_id: 'call_missing', content: '{}' },
          ],
        },
        param: 'messages[1].tool_call_id',
        type: 'invalid_request_error',
      },
      {
        path: '/v1/responses',
        body: {
          model: 'cortex-tools',
          input: [
            { type: 'message', role: 'user', content: question },
            { type: 'function_call_output', call_id: 'call_missing', output: '{}' },
          ],
        },
        param: 'input[1].call_id',
        type: 'invalid_request_error',
      },
      {
        path: '/v1/messages',
        body: {
          model: 'cortex-tools',
          max_tokens: 16,
          messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'call_missing', content: '{}' }] }],
        },
        param: 'messages[0].content[0].tool_use_id',
        type: 'invalid_request_error',
      },
    ];
    for (const { path, body, param, type } of cases) {
      const response = await postJson(`${stack.baseUrl}${path}`, body);
      const error = ((await response.json()) as { error: { type: string; message: string; param?: string } }).error;
      assert.equal(response.status, 400, path);
      assert.equal(error.type, type, path);
      assert.match(error.message, /'call_missing'/, path);
      assert.ok(error.message.startsWith(param), `${path}: ${error.message}`);
    }
    // A result for a call made earlier in the conversation is fine, by previous_response_id too.
    const first = await openai.responses.create({
      model: 'cortex-tools',
      input: question,
      tools: [{ type: 'function', name: 'get_weather', parameters: location, strict: true }],
    });
    const call = first.output.find((item) => item.type === 'function_call');
    assert.ok(call?.type === 'function_call');
    const answered = await openai.responses.create({
      model: 'cortex-tools',
      previous_response_id: first.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"temp_c": 21}' }],
    });
    assert.equal(answered.output_text, tools.expected.afterToolResult?.text);
  });
});
