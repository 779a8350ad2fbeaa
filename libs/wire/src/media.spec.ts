import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError } from '@cortex/contracts';
import { decodeMessagesRequest } from './anthropic/messages.decoder.js';
import { decodeChatRequest } from './openai/chat.decoder.js';
import { decodeResponsesRequest } from './responses/responses.decoder.js';

/** The refusal of an image names the field, the model, why, and where the client can see it. */
function refusesImage(decode: () => unknown, param: string, what: string): void {
  assert.throws(decode, (error: Error) => {
    assert.ok(error instanceof CortexError);
    assert.equal(error.code, 'invalid_request');
    assert.equal(error.extra.param, param);
    assert.equal(
      error.message,
      `${param}: ${what} are not supported: model 'vision-less' takes text only. ` +
        'node-llama-cpp, the inference backend, has no vision (image), audio or file input yet, ' +
        "so GET /v1/models lists capabilities.vision: false for 'vision-less'; send the content as text instead",
    );
    return true;
  });
}

const model = 'vision-less';

describe('media - an image is a 400 that says which model, why, and where to see it', () => {
  it('media - chat completions image_url', () => {
    const body = {
      model,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'see' },
            { type: 'image_url', image_url: { url: 'https://x/y.png' } },
          ],
        },
      ],
    };
    refusesImage(() => decodeChatRequest(body), 'messages[0].content[1]', 'image_url parts');
  });

  it('media - responses input_image, in a message and in a function call output', () => {
    const image = { type: 'input_image', image_url: 'https://x/y.png' };
    refusesImage(
      () => decodeResponsesRequest({ model, input: [{ role: 'user', content: [image] }] }),
      'input[0].content[0]',
      'input_image parts',
    );
    refusesImage(
      () => decodeResponsesRequest({ model, input: [{ type: 'function_call_output', call_id: 'c', output: [image] }] }),
      'input[0].output[0]',
      'input_image parts',
    );
  });

  it('media - anthropic image blocks, in a turn and in a tool result', () => {
    const image = { type: 'image', source: { type: 'base64', media_type: 'image/png', data: '' } };
    refusesImage(
      () => decodeMessagesRequest({ model, max_tokens: 5, messages: [{ role: 'user', content: [image] }] }),
      'messages[0].content[0]',
      'image blocks',
    );
    const result = { type: 'tool_result', tool_use_id: 'a', content: [image] };
    refusesImage(
      () => decodeMessagesRequest({ model, max_tokens: 5, messages: [{ role: 'user', content: [result] }] }),
      'messages[0].content[0].content[0]',
      'image blocks',
    );
  });
});
