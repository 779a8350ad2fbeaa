import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { ResponsesWS } from 'openai/resources/responses/ws';
import Anthropic from '@anthropic-ai/sdk';
import { startStack, waitFor, type TestStack } from '@cortex/testing';

const PIXEL =
  'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';
const WHY =
  /model 'cortex-chat' takes text only\. node-llama-cpp, the inference backend, has no vision \(image\), audio or file input yet, so GET \/v1\/models lists capabilities\.vision: false for 'cortex-chat'/;

describe('images e2e', () => {
  let stack: TestStack;
  let openai: OpenAI;

  before(async () => {
    stack = await startStack({
      models: [{ id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: 512, pinned: true }],
    });
    openai = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
  });

  after(async () => {
    await stack?.stop();
  });

  it('images e2e - /v1/models says the model has no vision', async () => {
    const model = (await openai.models.retrieve('cortex-chat')) as unknown as {
      capabilities: { vision: boolean } | null;
    };
    assert.equal(model.capabilities?.vision, false);
  });

  it('images e2e - an image is a 400 naming the model and why, in chat, responses and messages', async () => {
    const badRequest = (param: string) => (error: unknown) => {
      assert.ok(error instanceof OpenAI.BadRequestError || error instanceof Anthropic.BadRequestError, String(error));
      assert.match(error.message, WHY);
      assert.match(error.message, new RegExp(param.replace(/[[\].]/g, '\\$&')));
      return true;
    };
    await assert.rejects(
      openai.chat.completions.create({
        model: 'cortex-chat',
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'What is this?' },
              { type: 'image_url', image_url: { url: PIXEL } },
            ],
          },
        ],
      }),
      badRequest('messages[0].content[1]'),
    );
    await assert.rejects(
      openai.responses.create({
        model: 'cortex-chat',
        input: [{ role: 'user', content: [{ type: 'input_image', image_url: PIXEL, detail: 'auto' }] }],
      }),
      badRequest('input[0].content[0]'),
    );
    const anthropic = new Anthropic({ baseURL: stack.baseUrl, apiKey: 'unused', maxRetries: 0 });
    const image = {
      type: 'image' as const,
      source: { type: 'base64' as const, media_type: 'image/png' as const, data: PIXEL.split(',')[1] ?? '' },
    };
    await assert.rejects(
      anthropic.messages.create({
        model: 'cortex-chat',
        max_tokens: 16,
        messages: [{ role: 'user', content: [image] }],
      }),
      badRequest('messages[0].content[0]'),
    );
  });

  it('images e2e - on the Responses WebSocket the same refusal comes as the error envelope', async () => {
    const ws = new ResponsesWS(openai);
    const events: Array<{ type: string; status?: number; error?: { message: string; param: string | null } }> = [];
    ws.on('event', (event) => void events.push(event as never));
    ws.on('error', () => undefined);
    try {
      ws.send({
        type: 'response.create',
        model: 'cortex-chat',
        input: [{ role: 'user', content: [{ type: 'input_image', image_url: PIXEL, detail: 'auto' }] }],
      });
      await waitFor(() => events.length > 0, 30_000, 20);
      assert.equal(events[0]?.type, 'error');
      assert.equal(events[0]?.status, 400);
      assert.equal(events[0]?.error?.param, 'input[0].content[0]');
      assert.match(events[0]?.error?.message ?? '', WHY);
    } finally {
      ws.close();
    }
  });
});
