import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { Subjects, type StreamEvent } from '@cortex/contracts';
import { AGENT_SYSTEM_PROMPT, fixtureModel } from '@cortex/fixtures';
import { startStack, waitFor, watchBus, type TestStack } from '@cortex/testing';

type Finish = Extract<StreamEvent, { type: 'finish' }>;
type Start = Extract<StreamEvent, { type: 'start' }>;

/*
 * '✓' is in no fixture vocabulary, so each one is three byte tokens: the long prompt is ~30k tokens
 * whatever the vocabulary, which takes this CPU many seconds to evaluate at one thread.
 */
const MARK = '✓';
const LONG_MARKS = 10_000;
const PREFIX_MARKS = 6_000;

describe('long prompt e2e', () => {
  let stack: TestStack;
  let client: OpenAI;

  before(async () => {
    // One slot: the follow-up runs on the sequence the cancelled request used, so its cached prefix
    // says how far that request's prompt evaluation got.
    // Contexts as in the default catalogue (config/cortex.yaml).
    stack = await startStack({
      models: [
        { id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: 32_768, slots: 1, pinned: true },
        { id: 'cortex-tools', file: 'fixture:cortex-tools', context_size: 32_768, slots: 1 },
      ],
    });
    client = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
  });

  after(async () => {
    await stack?.stop();
  });

  it('long prompt e2e - a client that disconnects during prompt evaluation stops it at a batch boundary', async () => {
    const events = await watchBus<StreamEvent>(stack.nc, Subjects.streamsAll);
    const starts = (): Start[] => events.messages.filter((e): e is Start => e.type === 'start');
    const finishes = (): Finish[] => events.messages.filter((e): e is Finish => e.type === 'finish');
    try {
      const controller = new AbortController();
      // Not awaited: the response may not begin before the prompt is evaluated.
      const request = client.chat.completions
        .create(
          {
            model: 'cortex-chat',
            messages: [{ role: 'user', content: MARK.repeat(LONG_MARKS) }],
            stream: true,
            temperature: 0,
          },
          { signal: controller.signal },
        )
        .then(async (stream) => {
          for await (const _chunk of stream) {
            /* until the abort */
          }
        })
        .catch((error: unknown) => error);
      // `start` is published just before the prompt is evaluated: disconnect then.
      await waitFor(() => starts().length === 1, 60_000, 20);
      const longPrompt = starts()[0]?.promptTokens ?? 0;
      assert.ok(longPrompt > LONG_MARKS * 3, `the prompt is ${longPrompt} tokens`);
      controller.abort();
      assert.ok((await request) instanceof OpenAI.APIUserAbortError, 'the client gave up');
      await waitFor(() => finishes().length === 1, 120_000);
      const cancelled = finishes()[0];
      assert.equal(cancelled?.reason, 'cancelled');
      assert.equal(cancelled?.usage.completionTokens, 0, 'cancelled before the first token');

      // A follow-up whose prompt is a prefix of the cancelled one reuses what the sequence holds:
      // had the whole prompt been evaluated, all of this prefix would be cached.
      const followUp = await client.chat.completions.create({
        model: 'cortex-chat',
        messages: [{ role: 'user', content: MARK.repeat(PREFIX_MARKS) }],
        temperature: 0,
      });
      assert.equal(
        followUp.choices[0]?.message.content,
        fixtureModel('cortex-chat').expected.text,
        'the slot serves the next request',
      );
      await waitFor(() => finishes().length === 2, 120_000);
      const served = finishes()[1];
      const prefixTokens = PREFIX_MARKS * 3;
      assert.ok(
        (served?.usage.cachedPromptTokens ?? Infinity) < prefixTokens,
        `the follow-up found ${served?.usage.cachedPromptTokens} tokens of its ${served?.usage.promptTokens} cached: the cancelled ` +
          `request went on evaluating its ${longPrompt}-token prompt past the ${prefixTokens} tokens the two share`,
      );
    } finally {
      await events.stop();
    }
  });

  it('long prompt e2e - an 80 KB first agent turn with tools is answered by the default fixture context', async () => {
    let system = '';
    while (Buffer.byteLength(system) < 80_000) system += `${AGENT_SYSTEM_PROMPT}\n`;
    const anthropic = new Anthropic({ baseURL: stack.baseUrl, apiKey: 'unused', maxRetries: 0 });
    const message = await anthropic.messages.create({
      model: 'cortex-tools',
      max_tokens: 256,
      system,
      tools: [
        {
          name: 'get_weather',
          description: 'Current weather in a city',
          input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
        },
        {
          name: 'Bash',
          description: 'Runs a shell command',
          input_schema: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
        },
      ],
      messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
    });
    assert.equal(message.stop_reason, 'tool_use');
    const call = message.content.find((b): b is Anthropic.ToolUseBlock => b.type === 'tool_use');
    assert.deepEqual(call?.input, fixtureModel('cortex-tools').expected.toolCall?.arguments);
    assert.ok(
      message.usage.input_tokens > 15_000 && message.usage.input_tokens < 32_768,
      `${message.usage.input_tokens} input tokens`,
    );
  });
});
