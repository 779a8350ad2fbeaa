import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import { ResponsesWS } from 'openai/resources/responses/ws';
import Anthropic from '@anthropic-ai/sdk';
import { solidPng, VISION_FIXTURE, VISION_READ_FIXTURE } from '@cortex/fixtures';
import { freePort } from '@cortex/bus';
import { startStack, waitFor, type TestStack } from '@cortex/testing';

const PIXEL =
  'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';
const WHY =
  /are not supported: model 'cortex-chat' takes text only \(its catalogue entry names no projector, mmproj\), so GET \/v1\/models lists capabilities\.vision: false/;
const { expected } = VISION_FIXTURE;
const png = (colour: 'red' | 'green' | 'blue'): Buffer =>
  solidPng(32, 32, [...(expected[colour].rgb ?? [0, 0, 0])] as never);
const dataUri = (colour: 'red' | 'green' | 'blue'): string => `data:image/png;base64,${png(colour).toString('base64')}`;
const QUESTION = 'What is in the picture?';

describe('images e2e', () => {
  let stack: TestStack;
  let openai: OpenAI;
  let anthropic: Anthropic;
  let images: Server;
  let imageBase = '';

  before(async () => {
    images = createServer((req, res) => {
      const colour = /^\/(red|green|blue)\.png$/.exec(req.url ?? '')?.[1] as 'red' | 'green' | 'blue' | undefined;
      if (colour) res.writeHead(200, { 'content-type': 'image/png' }).end(png(colour));
      else res.writeHead(404).end();
    });
    await new Promise<void>((done) => images.listen(0, '127.0.0.1', done));
    imageBase = `http://127.0.0.1:${(images.address() as AddressInfo).port}`;
    stack = await startStack({
      models: [
        { id: 'cortex-chat', file: 'fixture:cortex-chat', context_size: 512, pinned: true },
        {
          id: 'cortex-vision',
          file: 'fixture:cortex-vision',
          mmproj: 'fixture:mmproj-cortex-vision',
          context_size: 512,
          slots: 2,
          pinned: true,
        },
        {
          id: VISION_READ_FIXTURE.id,
          file: `fixture:${VISION_READ_FIXTURE.id}`,
          mmproj: `fixture:mmproj-${VISION_READ_FIXTURE.id}`,
          context_size: 1024,
        },
      ],
      // The test's image server is on loopback: allowed here (the address guard has its own spec).
      config: { gateway: { images: { allow_private_urls: true, max_per_request: 3, max_bytes: 16_384 } } },
    });
    openai = new OpenAI({ baseURL: `${stack.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    anthropic = new Anthropic({ baseURL: stack.baseUrl, apiKey: 'unused', maxRetries: 0 });
    const vision = async (): Promise<boolean | undefined> =>
      ((await openai.models.retrieve('cortex-vision')) as unknown as { capabilities?: { vision?: boolean } })
        .capabilities?.vision;
    await waitFor(async () => (await vision()) === true, 120_000, 200);
  });

  after(async () => {
    await stack?.stop();
    await new Promise((done) => images?.close(done));
  });

  it('images e2e - /v1/models says which model has vision: the one with a projector, as its engine reports', async () => {
    const capabilities = async (id: string) =>
      ((await openai.models.retrieve(id)) as unknown as { capabilities: { vision: boolean } | null }).capabilities;
    assert.equal((await capabilities('cortex-chat'))?.vision, false);
    assert.equal((await capabilities('cortex-vision'))?.vision, true);
  });

  it('images e2e - chat completions: a data URI and an http URL, streamed and not; usage counts the image tokens', async () => {
    const ask = (content: OpenAI.ChatCompletionContentPart[]) => ({
      model: 'cortex-vision',
      messages: [{ role: 'user' as const, content }],
      max_tokens: 16,
      temperature: 0,
    });
    const plain = await openai.chat.completions.create(ask([{ type: 'text', text: QUESTION }]));
    assert.equal(plain.choices[0]?.message.content, expected.none.text);
    const red = await openai.chat.completions.create(
      ask([
        { type: 'text', text: QUESTION },
        { type: 'image_url', image_url: { url: dataUri('red') } },
      ]),
    );
    assert.equal(red.choices[0]?.message.content, expected.red.text);
    assert.equal(
      (red.usage?.prompt_tokens ?? 0) - (plain.usage?.prompt_tokens ?? 0),
      VISION_FIXTURE.tokensPerImage,
      'the image is counted as the tokens it took in the prompt',
    );
    const stream = await openai.chat.completions.create({
      ...ask([
        { type: 'text', text: QUESTION },
        { type: 'image_url', image_url: { url: `${imageBase}/blue.png`, detail: 'low' } },
      ]),
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      usage ??= chunk.usage;
    }
    assert.equal(text, expected.blue.text);
    assert.equal(usage?.prompt_tokens, red.usage?.prompt_tokens);
  });

  it('images e2e - responses: input_image by URL and by data URI, streamed and not, and in a function call output', async () => {
    const green = await openai.responses.create({
      model: 'cortex-vision',
      max_output_tokens: 16,
      input: [
        {
          role: 'user',
          content: [
            { type: 'input_text', text: QUESTION },
            { type: 'input_image', image_url: `${imageBase}/green.png`, detail: 'auto' },
          ],
        },
      ],
    });
    assert.equal(green.output_text, expected.green.text);
    assert.ok((green.usage?.input_tokens ?? 0) > VISION_FIXTURE.tokensPerImage);
    const stream = await openai.responses.create({
      model: 'cortex-vision',
      max_output_tokens: 16,
      stream: true,
      input: [{ role: 'user', content: [{ type: 'input_image', image_url: dataUri('red'), detail: 'auto' }] }],
    });
    let text = '';
    for await (const event of stream) if (event.type === 'response.output_text.delta') text += event.delta;
    assert.equal(text, expected.red.text);
    // A function's output that is an image (a tool that read an image file).
    const tool = await openai.responses.create({
      model: 'cortex-vision',
      max_output_tokens: 16,
      input: [
        { role: 'user', content: 'Open the picture' },
        { type: 'function_call', call_id: 'call_1', name: 'open_image', arguments: '{"name":"blue.png"}' },
        {
          type: 'function_call_output',
          call_id: 'call_1',
          output: [{ type: 'input_image', image_url: `${imageBase}/blue.png`, detail: 'auto' }],
        },
      ],
    });
    assert.equal(tool.output_text, expected.blue.text);
  });

  it("images e2e - messages: a base64 block streamed and not, and a Claude Code Read tool's tool_result image", async () => {
    const block = (colour: 'red' | 'green' | 'blue') => ({
      type: 'image' as const,
      source: { type: 'base64' as const, media_type: 'image/png' as const, data: png(colour).toString('base64') },
    });
    const green = await anthropic.messages.create({
      model: 'cortex-vision',
      max_tokens: 16,
      messages: [{ role: 'user', content: [{ type: 'text', text: QUESTION }, block('green')] }],
    });
    assert.equal(green.content[0]?.type === 'text' ? green.content[0].text : '', expected.green.text);
    const streamed = anthropic.messages.stream({
      model: 'cortex-vision',
      max_tokens: 16,
      messages: [{ role: 'user', content: [block('blue')] }],
    });
    assert.equal((await streamed.finalText()).trim(), expected.blue.text);
    // What Claude Code sends after its Read tool opened an image file.
    const read = await anthropic.messages.create({
      model: 'cortex-vision',
      max_tokens: 16,
      messages: [
        { role: 'user', content: 'Look at red.png' },
        {
          role: 'assistant',
          content: [{ type: 'tool_use', id: 'toolu_1', name: 'Read', input: { file_path: '/tmp/red.png' } }],
        },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [block('red')] }] },
      ],
    });
    assert.equal(read.content[0]?.type === 'text' ? read.content[0].text : '', expected.red.text);
    assert.ok(read.usage.input_tokens > VISION_FIXTURE.tokensPerImage);
  });

  it("images e2e - a vision model's tool call comes back as a call in every dialect, and the image in its result answers", async () => {
    const model = VISION_READ_FIXTURE.id;
    const call = VISION_READ_FIXTURE.toolCall;
    const parameters = { type: 'object', properties: { file_path: { type: 'string' } }, required: ['file_path'] };
    const tools: OpenAI.ChatCompletionTool[] = [{ type: 'function', function: { name: 'Read', parameters } }];
    const question = { role: 'user' as const, content: QUESTION };
    const asked = await openai.chat.completions.create({ model, messages: [question], tools });
    const made = asked.choices[0]?.message.tool_calls?.[0];
    assert.equal(asked.choices[0]?.finish_reason, 'tool_calls');
    assert.ok(made?.type === 'function', JSON.stringify(asked.choices[0]?.message));
    assert.deepEqual([made.function.name, JSON.parse(made.function.arguments)], [call?.name, call?.arguments]);
    assert.equal(asked.choices[0]?.message.content ?? '', '');
    let streamedArgs = '';
    let finish: string | null | undefined;
    for await (const chunk of await openai.chat.completions.create({
      model,
      messages: [question],
      tools,
      stream: true,
    })) {
      for (const delta of chunk.choices[0]?.delta.tool_calls ?? []) streamedArgs += delta.function?.arguments ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.deepEqual([finish, JSON.parse(streamedArgs)], ['tool_calls', call?.arguments]);
    // The tool's result is the image, as OpenAI tool messages with content parts carry it.
    const answered = await openai.chat.completions.create({
      model,
      tools,
      messages: [
        question,
        { role: 'assistant', content: null, tool_calls: [made] },
        { role: 'tool', tool_call_id: made.id, content: [{ type: 'image_url', image_url: { url: dataUri('red') } }] },
      ] as OpenAI.ChatCompletionMessageParam[],
    });
    assert.equal(answered.choices[0]?.message.content, expected.red.text);
    const response = await openai.responses.create({
      model,
      input: QUESTION,
      tools: [{ type: 'function', name: 'Read', parameters, strict: false }],
    });
    const item = response.output.find((o) => o.type === 'function_call');
    assert.ok(item?.type === 'function_call', JSON.stringify(response.output));
    assert.deepEqual([item.name, JSON.parse(item.arguments)], [call?.name, call?.arguments]);
    const message = await anthropic.messages.create({
      model,
      max_tokens: 64,
      tools: [{ name: 'Read', input_schema: parameters as Anthropic.Tool.InputSchema }],
      messages: [question],
    });
    const use = message.content.find((block) => block.type === 'tool_use');
    assert.equal(message.stop_reason, 'tool_use');
    assert.ok(use?.type === 'tool_use', JSON.stringify(message.content));
    assert.deepEqual([use.name, use.input], [call?.name, call?.arguments]);
  });

  it("images e2e - a vision model's answer held to a JSON schema, a forced call and a strict tool's arguments, in every dialect", async () => {
    const schema = {
      type: 'object',
      properties: { colour: { enum: ['red', 'green', 'blue'] }, sure: { type: 'boolean' } },
      required: ['colour', 'sure'],
      additionalProperties: false,
    };
    const valid = (text: string, what: string): void => {
      const answer = JSON.parse(text) as Record<string, unknown>;
      assert.deepEqual(Object.keys(answer).sort(), ['colour', 'sure'], `${what}: ${text}`);
      assert.ok(['red', 'green', 'blue'].includes(answer.colour as string), `${what}: ${text}`);
      assert.equal(typeof answer.sure, 'boolean', `${what}: ${text}`);
    };
    const picture = { type: 'image_url' as const, image_url: { url: dataUri('red') } };
    const chat = await openai.chat.completions.create({
      model: 'cortex-vision',
      messages: [{ role: 'user', content: [{ type: 'text', text: QUESTION }, picture] }],
      response_format: { type: 'json_schema', json_schema: { name: 'colour', schema, strict: true } },
      max_tokens: 64,
    });
    valid(chat.choices[0]?.message.content ?? '', 'chat');
    const response = await openai.responses.create({
      model: 'cortex-vision',
      input: [
        {
          role: 'user',
          content: [
            { type: 'input_text', text: QUESTION },
            { type: 'input_image', image_url: dataUri('red'), detail: 'auto' },
          ],
        },
      ],
      text: { format: { type: 'json_schema', name: 'colour', schema, strict: true } },
      max_output_tokens: 64,
    });
    valid(response.output_text, 'responses');
    const message = await anthropic.messages.create({
      model: 'cortex-vision',
      max_tokens: 64,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: QUESTION },
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: png('red').toString('base64') } },
          ],
        },
      ],
      output_format: { type: 'json_schema', schema },
    } as Anthropic.MessageCreateParamsNonStreaming);
    valid(message.content.find((block) => block.type === 'text')?.text ?? '', 'messages');

    // A forced call of a tool the fixture never calls itself, and a strict tool's call, whose arguments match.
    const colour = {
      type: 'object',
      properties: { colour: { enum: ['red', 'green', 'blue'] }, count: { type: 'integer' } },
      required: ['colour', 'count'],
    };
    const read = { type: 'object', properties: { file_path: { type: 'string' } }, required: ['file_path'] };
    const model = VISION_READ_FIXTURE.id;
    const typed = (args: Record<string, unknown>, what: string): void => {
      assert.ok(['red', 'green', 'blue'].includes(args.colour as string), `${what}: ${JSON.stringify(args)}`);
      assert.ok(Number.isInteger(args.count), `${what}: ${JSON.stringify(args)}`);
    };
    for (const strictRead of [false, true]) {
      const forced = await openai.chat.completions.create({
        model,
        messages: [{ role: 'user', content: QUESTION }],
        tools: [
          { type: 'function', function: { name: 'Read', parameters: read, strict: strictRead } },
          { type: 'function', function: { name: 'Colour', parameters: colour } },
        ],
        tool_choice: strictRead ? 'auto' : { type: 'function', function: { name: 'Colour' } },
        max_tokens: 256,
      });
      const made = forced.choices[0]?.message.tool_calls?.[0];
      assert.equal(forced.choices[0]?.finish_reason, 'tool_calls', JSON.stringify(forced.choices[0]));
      assert.ok(made?.type === 'function');
      if (strictRead)
        assert.deepEqual(
          [made.function.name, JSON.parse(made.function.arguments)],
          ['Read', VISION_READ_FIXTURE.toolCall?.arguments],
        );
      else {
        assert.equal(made.function.name, 'Colour');
        typed(JSON.parse(made.function.arguments) as Record<string, unknown>, 'chat');
      }
    }
    const called = await openai.responses.create({
      model,
      input: QUESTION,
      tools: [
        { type: 'function', name: 'Read', parameters: read, strict: true },
        { type: 'function', name: 'Colour', parameters: colour, strict: true },
      ],
      tool_choice: { type: 'function', name: 'Colour' },
      max_output_tokens: 256,
    });
    const item = called.output.find((o) => o.type === 'function_call');
    assert.ok(item?.type === 'function_call' && item.name === 'Colour', JSON.stringify(called.output));
    typed(JSON.parse(item.arguments) as Record<string, unknown>, 'responses');
    const used = await anthropic.messages.create({
      model,
      max_tokens: 256,
      tools: [
        { name: 'Read', input_schema: read as Anthropic.Tool.InputSchema },
        { name: 'Colour', input_schema: colour as Anthropic.Tool.InputSchema },
      ],
      tool_choice: { type: 'tool', name: 'Colour' },
      messages: [{ role: 'user', content: QUESTION }],
    });
    const use = used.content.find((block) => block.type === 'tool_use');
    assert.equal(used.stop_reason, 'tool_use');
    assert.ok(use?.type === 'tool_use' && use.name === 'Colour', JSON.stringify(used.content));
    typed(use.input as Record<string, unknown>, 'messages');
  });

  it('images e2e - too many, too large and corrupt images are 400s naming the part; the model serves on', async () => {
    const refusal = async (content: OpenAI.ChatCompletionContentPart[], param: string, why: RegExp) => {
      const error = await openai.chat.completions
        .create({ model: 'cortex-vision', messages: [{ role: 'user', content }], max_tokens: 4 })
        .then(
          () => assert.fail('expected a 400'),
          (e: unknown) => e,
        );
      assert.ok(error instanceof OpenAI.BadRequestError, String(error));
      assert.equal((error.error as { param?: string } | undefined)?.param, param);
      assert.match(error.message, why);
    };
    const image = (url: string): OpenAI.ChatCompletionContentPart => ({ type: 'image_url', image_url: { url } });
    await refusal(
      [image(dataUri('red')), image(dataUri('red')), image(dataUri('red')), image(dataUri('red'))],
      'messages[0].content[3]',
      /at most 3 images/,
    );
    const large = Buffer.concat([png('red'), Buffer.alloc(20_000)]).toString('base64');
    await refusal([image(`data:image/png;base64,${large}`)], 'messages[0].content[0]', /larger than 16384 bytes/);
    const corrupt = Buffer.concat([png('red').subarray(0, 8), Buffer.from('garbage')]).toString('base64');
    await refusal([image(`data:image/png;base64,${corrupt}`)], 'messages[0].content[0]', /corrupt/);
    await refusal([image(`${imageBase}/missing.png`)], 'messages[0].content[0]', /HTTP 404/);
    const after = await openai.chat.completions.create({
      model: 'cortex-vision',
      messages: [{ role: 'user', content: [image(dataUri('green'))] }],
      max_tokens: 16,
    });
    assert.equal(after.choices[0]?.message.content, expected.green.text);
  });

  it("images e2e - a gateway that keeps to public addresses refuses an image URL on the test's own host, naming the part", async () => {
    // A second gateway on the same bus, with the default `allow_private_urls: false`.
    const config = JSON.parse(readFileSync(stack.configPath, 'utf8')) as Record<string, Record<string, unknown>>;
    const port = await freePort();
    config.gateway = { ...config.gateway, listen: `127.0.0.1:${port}`, images: { allow_private_urls: false } };
    const path = `${stack.configPath}.strict.json`;
    writeFileSync(path, JSON.stringify(config));
    const child = stack.spawnService('gateway', { CORTEX_CONFIG: path });
    try {
      const strict = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0 });
      await waitFor(async () => (await strict.models.list().catch(() => null)) !== null, 30_000);
      for (const url of [`${imageBase}/red.png`, imageBase.replace('127.0.0.1', 'localhost') + '/red.png']) {
        const error = await strict.chat.completions
          .create({
            model: 'cortex-vision',
            messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url } }] }],
            max_tokens: 4,
          })
          .then(
            () => assert.fail(`${url} must be refused`),
            (e: unknown) => e,
          );
        assert.ok(error instanceof OpenAI.BadRequestError, String(error));
        assert.equal((error.error as { param?: string } | undefined)?.param, 'messages[0].content[0]');
        assert.match(error.message, /non-public address; the gateway fetches public addresses only/);
      }
    } finally {
      child.kill('SIGTERM');
    }
  });

  it('images e2e - a text-only model refuses an image with a 400 naming the model and why, in every dialect', async () => {
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
