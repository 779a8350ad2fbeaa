import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CortexError, requestImages, type CanonicalRequest } from '@cortex/contracts';
import { decodeMessagesRequest } from './anthropic/messages.decoder.js';
import { decodeChatRequest } from './openai/chat.decoder.js';
import { decodeResponsesRequest } from './responses/responses.decoder.js';
import { refuseImages } from './media.js';

const model = 'vision-less';
const PIXEL = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

/** The refusal of a request's images names the field, the model, why, and where the client can see it. */
function refusesImages(request: CanonicalRequest, dialect: string, param: string, what: string): void {
  assert.throws(
    () => refuseImages(request, dialect),
    (error: Error) => {
      assert.ok(error instanceof CortexError);
      assert.equal(error.code, 'invalid_request');
      assert.equal(error.extra.param, param);
      assert.equal(
        error.message,
        `${param}: ${what} are not supported: model 'vision-less' takes text only ` +
          '(its catalogue entry names no projector, mmproj), so GET /v1/models lists capabilities.vision: false ' +
          'for it; send the content as text, or ask a model with vision',
      );
      return true;
    },
  );
}

describe('media - images are decoded where they stand, then refused for a model that takes text only', () => {
  it('media - chat completions: a data URI and a URL, with detail, at their offsets in the text', () => {
    const request = decodeChatRequest({
      model,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'see ' },
            { type: 'image_url', image_url: { url: `data:image/png;base64,${PIXEL}`, detail: 'low' } },
            { type: 'text', text: 'and' },
            { type: 'image_url', image_url: { url: 'https://example.com/y.png' } },
          ],
        },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c', type: 'function', function: { name: 'read', arguments: '{}' } }],
        },
        { role: 'tool', tool_call_id: 'c', content: [{ type: 'image_url', image_url: { url: 'http://a/b.png' } }] },
      ],
    } as never);
    assert.equal(request.messages[0]?.content, 'see and');
    assert.deepEqual(request.messages[0]?.images, [
      { at: 4, part: 'messages[0].content[1]', data: PIXEL, mediaType: 'image/png', detail: 'low' },
      { at: 7, part: 'messages[0].content[3]', url: 'https://example.com/y.png' },
    ]);
    assert.equal(requestImages(request).length, 3);
    refusesImages(request, 'openai.chat', 'messages[0].content[1]', 'image_url parts');
  });

  it('media - responses input_image, in a message and in a function call output', () => {
    const image = { type: 'input_image', image_url: 'https://x/y.png' };
    const inMessage = decodeResponsesRequest({
      model,
      input: [{ role: 'user', content: [{ type: 'input_text', text: 'look' }, image] }],
    }).request;
    assert.deepEqual(inMessage.messages[0]?.images, [
      { at: 4, part: 'input[0].content[1]', url: 'https://x/y.png', detail: 'auto' },
    ]);
    refusesImages(inMessage, 'openai.responses', 'input[0].content[1]', 'input_image parts');
    const inOutput = decodeResponsesRequest({
      model,
      input: [
        { type: 'function_call', call_id: 'c', name: 'read', arguments: '{}' },
        { type: 'function_call_output', call_id: 'c', output: [image] },
      ],
    }).request;
    const tool = inOutput.messages.find((m) => m.role === 'tool');
    assert.deepEqual(tool?.images, [{ at: 0, part: 'input[1].output[0]', url: 'https://x/y.png', detail: 'auto' }]);
    refusesImages(inOutput, 'openai.responses', 'input[1].output[0]', 'input_image parts');
  });

  it('media - anthropic image blocks, in a turn and in a Claude Code Read tool result', () => {
    const image = { type: 'image', source: { type: 'base64', media_type: 'image/PNG', data: PIXEL } };
    const turn = decodeMessagesRequest({
      model,
      max_tokens: 5,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'what is it?' }, image] }],
    }).request;
    assert.deepEqual(turn.messages[0]?.images, [
      { at: 11, part: 'messages[0].content[1]', data: PIXEL, mediaType: 'image/png' },
    ]);
    refusesImages(turn, 'anthropic.messages', 'messages[0].content[1]', 'image blocks');
    const read = decodeMessagesRequest({
      model,
      max_tokens: 5,
      messages: [
        { role: 'user', content: 'read it' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'a', name: 'Read', input: { file_path: 'x.png' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'a', is_error: true, content: [image] }] },
      ],
    }).request;
    const result = read.messages.find((m) => m.role === 'tool');
    assert.equal(result?.content, 'Error: ');
    assert.deepEqual(result?.images, [
      { at: 7, part: 'messages[2].content[0].content[0]', data: PIXEL, mediaType: 'image/png' },
    ]);
    refusesImages(read, 'anthropic.messages', 'messages[2].content[0].content[0]', 'image blocks');
  });

  it('media - malformed images are refused at decoding, naming the field', () => {
    const chat = (url: string) => () =>
      decodeChatRequest({
        model,
        messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url } }] }],
      } as never);
    assert.throws(chat('ftp://x/y.png'), /messages\[0\]\.content\[0\]: an image URL must be http, https or a base64/);
    assert.throws(chat('data:image/png,raw'), /must be base64/);
    assert.throws(
      () =>
        decodeMessagesRequest({
          model,
          max_tokens: 5,
          messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'file', file_id: 'f' } }] }],
        }),
      /messages\[0\]\.content\[0\]\.source\.type: an image source must be base64 or url/,
    );
    assert.throws(
      () =>
        decodeMessagesRequest({
          model,
          max_tokens: 5,
          messages: [{ role: 'assistant', content: [{ type: 'image', source: { type: 'url', url: 'https://x' } }] }],
        }),
      /image blocks belong in user turns and tool results/,
    );
    assert.throws(
      () =>
        decodeResponsesRequest({
          model,
          input: [{ role: 'user', content: [{ type: 'input_image', file_id: 'file_1', image_url: null }] }],
        }),
      /input\[0\]\.content\[0\]\.file_id: files are not kept here/,
    );
  });

  it('media - audio and files are still refused at decoding', () => {
    assert.throws(
      () =>
        decodeChatRequest({
          model,
          messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: '', format: 'wav' } }] }],
        } as never),
      /messages\[0\]\.content\[0\]: input_audio parts are not supported/,
    );
  });
});
