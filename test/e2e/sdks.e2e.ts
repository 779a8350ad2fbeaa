import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { generateObject, generateText, streamText, type LanguageModel } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { ChatOpenAI } from '@langchain/openai';
import { ChatAnthropic } from '@langchain/anthropic';
import type { BaseChatModel } from '@langchain/core/language_models/chat_models';
import { z } from 'zod';
import { compileJsonSchema } from '@cortex/contracts';
import { fixtureModel } from '@cortex/fixtures';
import {
  postJson,
  postSse,
  startStack,
  storiesAvailable,
  FIXTURE_CATALOGUE,
  STORIES_260K,
  type TestStack,
} from '@cortex/testing';

/*
 * The SDKs people build on, driving the gateway as they would drive OpenAI or Anthropic: the AI SDK's
 * four providers and LangChain's chat models. Structured output runs on the fixture models: their
 * greedy chain is text, so under a grammar the model writes whatever the grammar allows that it
 * rates highest, and the tests check what comes back against the schema, not exact values.
 */
const chat = fixtureModel('cortex-chat');
const tools = fixtureModel('cortex-tools');
const prompt = 'Say hello.';

/**
 * The shape that failed before: integers that came back with exponents, numbers that overflowed. The
 * name is an enum rather than a bounded string: Anthropic's provider moves `maxLength` into the
 * description (its API does not take it), and a fixture's string never ends by itself.
 */
const city = z.object({
  name: z.enum(['Paris', 'Lyon', 'Nice']),
  population: z.int(),
  founded: z.int(),
  area: z.number(),
});
const citySchema = z.toJSONSchema(city);

function assertCity(value: unknown): void {
  const validate = compileJsonSchema(citySchema as Record<string, unknown>);
  assert.ok(
    validate(value),
    `the object validates against the schema: ${JSON.stringify(value)} ${JSON.stringify(validate.errors)}`,
  );
  const object = value as z.infer<typeof city>;
  assert.ok(Number.isSafeInteger(object.population) && Number.isSafeInteger(object.founded));
  assert.ok(Number.isFinite(object.area));
}

describe('sdks e2e', () => {
  let stack: TestStack;
  let providers: Record<string, (model: string) => LanguageModel>;

  before(async () => {
    const models: Array<Record<string, unknown>> = FIXTURE_CATALOGUE.map((m) => ({ ...m, context_size: 2048 }));
    if (storiesAvailable()) models.push({ id: 'stories260K', file: STORIES_260K, context_size: 1024, slots: 2 });
    stack = await startStack({ models });
    const v1 = `${stack.baseUrl}/v1`;
    const openai = createOpenAI({ baseURL: v1, apiKey: 'unused' });
    const anthropic = createAnthropic({ baseURL: v1, apiKey: 'unused' });
    const compatible = createOpenAICompatible({
      name: 'cortex',
      baseURL: v1,
      apiKey: 'unused',
      supportsStructuredOutputs: true,
    });
    providers = {
      'openai responses': (model) => openai.responses(model),
      'openai chat': (model) => openai.chat(model),
      anthropic: (model) => anthropic(model),
      'openai-compatible': (model) => compatible(model),
    };
  });

  after(async () => {
    await stack?.stop();
  });

  for (const name of ['openai responses', 'openai chat', 'anthropic', 'openai-compatible']) {
    it(`sdks e2e - AI SDK ${name}: generateText and streamText return the fixture sentence`, async () => {
      const model = providers[name]!('cortex-chat');
      const generated = await generateText({ model, prompt, maxRetries: 0 });
      assert.equal(generated.text, chat.expected.text);
      assert.equal(generated.finishReason, 'stop');
      const streamed = streamText({ model, prompt, maxRetries: 0 });
      let text = '';
      for await (const delta of streamed.textStream) text += delta;
      assert.equal(text, chat.expected.text);
    });

    it(`sdks e2e - AI SDK ${name}: generateObject returns an object that validates, integers and numbers included`, async () => {
      // Anthropic's provider asks for structured output with a forced `json` tool on models it does not
      // know; the fixture that writes tool calls takes that path, the others output_config.format.
      const result = await generateObject({
        model: providers[name]!(name === 'anthropic' ? 'cortex-tools' : 'cortex-chat'),
        schema: city,
        prompt,
        maxRetries: 0,
      });
      assertCity(result.object);
      if (name === 'anthropic') {
        const native = await generateObject({
          model: providers[name]!('cortex-chat'),
          schema: city,
          prompt,
          maxRetries: 0,
          providerOptions: { anthropic: { structuredOutputMode: 'outputFormat' } },
        });
        assertCity(native.object);
      }
    });
  }

  it('sdks e2e - AI SDK: tools the request does not declare are never called', async () => {
    const result = await generateText({ model: providers['openai chat']!('cortex-tools'), prompt, maxRetries: 0 });
    assert.deepEqual(result.toolCalls, []);
    assert.equal(result.text, tools.expected.raw);
  });

  it(
    'sdks e2e - AI SDK: output that breaks the schema is an error, not an object',
    { skip: !storiesAvailable() && 'no ../shared/models' },
    async () => {
      // The grammar cannot hold a pattern; the validation of the final object catches the mismatch.
      const strict = z.object({ code: z.string().regex(/^[A-Z]{3}$/) });
      await assert.rejects(
        generateObject({
          model: providers['openai chat']!('stories260K'),
          schema: strict,
          prompt: 'Once upon a time',
          temperature: 0,
          maxRetries: 0,
        }),
        (error: Error & { statusCode?: number }) => {
          assert.equal(error.statusCode, 502, error.message);
          assert.match(error.message, /does not match the requested JSON schema: output\/code must match pattern/);
          return true;
        },
      );
    },
  );

  it(
    "sdks e2e - streamed output that breaks the schema ends with the dialect's error, not a finish",
    { skip: !storiesAvailable() && 'no ../shared/models' },
    async () => {
      const schema = {
        type: 'object',
        properties: { code: { type: 'string', pattern: '^[A-Z]{3}$' } },
        required: ['code'],
        additionalProperties: false,
      };
      const mismatch = /does not match the requested JSON schema: output\/code must match pattern/;
      const base = { model: 'stories260K', stream: true, temperature: 0 };
      const lastData = (messages: Array<{ event?: string; data: string }>) =>
        messages
          .filter((m) => m.data !== '[DONE]')
          .map((m) => ({ event: m.event, data: JSON.parse(m.data) as Record<string, any> })); // eslint-disable-line @typescript-eslint/no-explicit-any

      const chatStream = lastData(
        (
          await postSse(`${stack.baseUrl}/v1/chat/completions`, {
            ...base,
            messages: [{ role: 'user', content: 'Once upon a time' }],
            response_format: { type: 'json_schema', json_schema: { name: 'r', schema } },
          })
        ).messages,
      );
      assert.ok(
        chatStream.some((m) => m.data.choices?.[0]?.delta?.content),
        'the answer streamed before the check',
      );
      assert.ok(!chatStream.some((m) => m.data.choices?.[0]?.finish_reason), 'no finish_reason');
      assert.equal(chatStream.at(-1)?.data.error?.code, 'invalid_output');
      assert.match(chatStream.at(-1)?.data.error?.message, mismatch);

      const responses = lastData(
        (
          await postSse(`${stack.baseUrl}/v1/responses`, {
            ...base,
            input: 'Once upon a time',
            text: { format: { type: 'json_schema', name: 'r', schema } },
          })
        ).messages,
      );
      assert.deepEqual(
        responses.slice(-2).map((m) => m.data.type),
        ['error', 'response.failed'],
      );
      assert.match(responses.at(-2)?.data.message, mismatch);

      const messages = lastData(
        (
          await postSse(`${stack.baseUrl}/v1/messages`, {
            ...base,
            max_tokens: 200,
            messages: [{ role: 'user', content: 'Once upon a time' }],
            output_config: { format: { type: 'json_schema', schema } },
          })
        ).messages,
      );
      assert.ok(!messages.some((m) => m.event === 'message_stop'), 'no message_stop');
      assert.equal(messages.at(-1)?.event, 'error');
      assert.equal(messages.at(-1)?.data.error?.type, 'api_error');
      assert.match(messages.at(-1)?.data.error?.message, mismatch);
    },
  );

  describe('langchain', () => {
    const models = (): Array<[string, (model: string) => BaseChatModel]> => [
      [
        'ChatOpenAI',
        (model) =>
          new ChatOpenAI({ model, apiKey: 'unused', maxRetries: 0, configuration: { baseURL: `${stack.baseUrl}/v1` } }),
      ],
      [
        'ChatOpenAI responses',
        (model) =>
          new ChatOpenAI({
            model,
            apiKey: 'unused',
            maxRetries: 0,
            useResponsesApi: true,
            configuration: { baseURL: `${stack.baseUrl}/v1` },
          }),
      ],
      [
        'ChatAnthropic',
        (model) => new ChatAnthropic({ model, apiKey: 'unused', maxRetries: 0, anthropicApiUrl: stack.baseUrl }),
      ],
    ];

    for (const [name, index] of [
      ['ChatOpenAI', 0],
      ['ChatOpenAI responses', 1],
      ['ChatAnthropic', 2],
    ] as const) {
      const make = (model: string): BaseChatModel => models()[index]![1](model);

      it(`sdks e2e - LangChain ${name}: invoke and stream`, async () => {
        const message = await make('cortex-chat').invoke(prompt);
        assert.equal(message.text, chat.expected.text);
        let text = '';
        for await (const chunk of await make('cortex-chat').stream(prompt)) text += chunk.text;
        assert.equal(text, chat.expected.text);
      });

      it(`sdks e2e - LangChain ${name}: withStructuredOutput returns an object that validates`, async () => {
        // ChatAnthropic structures output with a forced tool call, which needs the tool-calling fixture.
        const model = make(name === 'ChatAnthropic' ? 'cortex-tools' : 'cortex-chat');
        assertCity(await model.withStructuredOutput(city).invoke(prompt));
        if (name === 'ChatAnthropic') {
          // Its jsonSchema method moves every string constraint, enum included, into descriptions, so the
          // grammar cannot hold a string to them: this schema has numbers only.
          const figures = city.omit({ name: true });
          const object = await make('cortex-chat')
            .withStructuredOutput(figures, { method: 'jsonSchema' })
            .invoke(prompt);
          assertCity({ ...object, name: 'Paris' });
        }
      });

      it(`sdks e2e - LangChain ${name}: bindTools gets the fixture's tool call`, async () => {
        const weather = { name: 'get_weather', description: 'Current weather', schema: z.object({ city: z.string() }) };
        const model = make('cortex-tools');
        assert.ok(model.bindTools, 'the model binds tools');
        const message = await model.bindTools([weather]).invoke(prompt);
        assert.equal(message.tool_calls?.length, 1);
        assert.equal(message.tool_calls?.[0]?.name, tools.expected.toolCall?.name);
        assert.deepEqual(message.tool_calls?.[0]?.args, tools.expected.toolCall?.arguments);
      });
    }
  });

  it('sdks e2e - a response schema that is not an object is a 400 in each dialect, naming the field', async () => {
    const messages = [{ role: 'user', content: prompt }];
    const chatReply = await postJson(`${stack.baseUrl}/v1/chat/completions`, {
      model: 'cortex-chat',
      messages,
      response_format: { type: 'json_schema', json_schema: { name: 'r', schema: 'object' } },
    });
    assert.equal(chatReply.status, 400);
    assert.equal(
      ((await chatReply.json()) as { error: { param: string } }).error.param,
      'response_format.json_schema.schema',
    );
    const responses = await postJson(`${stack.baseUrl}/v1/responses`, {
      model: 'cortex-chat',
      input: prompt,
      text: { format: { type: 'json_schema', name: 'r', schema: [] } },
    });
    assert.equal(responses.status, 400);
    assert.equal(((await responses.json()) as { error: { param: string } }).error.param, 'text.format.schema');
    const anthropic = await postJson(`${stack.baseUrl}/v1/messages`, {
      model: 'cortex-chat',
      max_tokens: 64,
      messages,
      output_config: { format: { type: 'json_schema', schema: 5 } },
    });
    assert.equal(anthropic.status, 400);
    const error = (await anthropic.json()) as { type: string; error: { type: string; message: string } };
    assert.equal(error.error.type, 'invalid_request_error');
    assert.match(error.error.message, /^output_config\.format\.schema: must be a JSON schema object/);
  });
});
