import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { CortexError, type CanonicalImage, type CanonicalRequest } from '@cortex/contracts';
import {
  ensureVisionFixture,
  solidPng,
  VISION_FIXTURE,
  VISION_READ_FIXTURE,
  VISION_READ_PATH,
  type VisionColour,
  type VisionFixture,
} from '@cortex/fixtures';
import type { EngineEvent, EngineModel, GenerateJob } from '../engine.types.js';
import { llamaNode, MEDIA_MARKER } from './llama-node.types.js';
import { MtmdEngine } from './mtmd-engine.js';

/*
 * The vision engine on the real library and the vision fixture (cortex-vision.gguf with its mlp
 * projector), one thread: the fixture answers the dominant colour of the image in its context, or
 * `No image.` without one. How the output is read (stop strings, call limits, finish reasons, usage)
 * is the output processor's, specified once for both engines in output-processor.spec.ts.
 */

const unavailable = (() => {
  try {
    llamaNode();
    return false;
  } catch (error) {
    return `@fugood/llama.node cannot load here: ${(error as Error).message}`;
  }
})();

const QUESTION = 'What colour is this image?';

function image(colour: VisionColour, at = 0): CanonicalImage {
  const rgb = VISION_FIXTURE.expected[colour].rgb as [number, number, number];
  return { at, part: 'messages[0].content[0]', data: solidPng(32, 32, rgb).toString('base64'), mediaType: 'image/png' };
}

function request(images: CanonicalImage[] = [], extra: Partial<CanonicalRequest> = {}): CanonicalRequest {
  return {
    model: VISION_FIXTURE.id,
    messages: [{ role: 'user', content: QUESTION, images }],
    sampling: { temperature: 0, maxTokens: 16 },
    stream: true,
    ...extra,
  };
}

async function run(
  model: EngineModel,
  req: CanonicalRequest,
  job: Partial<GenerateJob> & { onEvent?: (event: EngineEvent) => void } = {},
): Promise<{ text: string; events: EngineEvent[]; finish: Extract<EngineEvent, { type: 'finish' }> }> {
  const events: EngineEvent[] = [];
  await model.generate({
    request: req,
    receivedAt: performance.now(),
    signal: new AbortController().signal,
    ...job,
    emit: (event) => {
      events.push(event);
      job.onEvent?.(event);
    },
  });
  const finish = events.at(-1);
  assert.ok(finish?.type === 'finish', `the last event is a finish: ${JSON.stringify(finish)}`);
  const text = events.flatMap((e) => (e.type === 'text' ? [e.text] : [])).join('');
  return { text, events, finish };
}

/** A vision fixture written into `dir` and loaded on the CPU with one thread. */
async function loadFixture(
  dir: string,
  fixture: VisionFixture,
  shape: { contextSize: number; slots: number; maxQueue: number },
): Promise<EngineModel> {
  const paths = await ensureVisionFixture(dir, { fixture });
  const engine = await MtmdEngine.create({ gpu: 'cpu', threads: 1, log: () => {} });
  return engine.load({ id: fixture.id, path: paths.model, mmproj: paths.projector, ...shape });
}

describe('vision engine', { skip: unavailable }, () => {
  let dir: string;
  let model: EngineModel;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'cortex-mtmd-'));
    model = await loadFixture(dir, VISION_FIXTURE, { contextSize: 256, slots: 2, maxQueue: 8 });
  });
  after(async () => {
    await model?.dispose();
    await rm(dir, { recursive: true, force: true });
  });

  it('vision engine - a file that is no projector fails the load with its reason, before llama.cpp sees it', async () => {
    const engine = await MtmdEngine.create({ gpu: 'cpu', threads: 1, log: () => {} });
    const paths = await ensureVisionFixture(dir);
    await assert.rejects(
      engine.load({ id: 'bad', path: paths.model, mmproj: paths.model, contextSize: 256, slots: 1, maxQueue: 1 }),
      /mmproj .*cortex-vision\.gguf cannot be loaded: its architecture is llama, not clip/,
    );
  });

  it("vision engine - reports vision from the projector, tools and reasoning from its template's format, no raw completions", () => {
    assert.deepEqual(model.capabilities, {
      tools: true,
      reasoning: true,
      format: 'hermes',
      vision: true,
      completions: false,
      fim: false,
    });
    assert.equal(model.format, 'hermes (recognised in its chat template)');
  });

  it('vision engine - an image in the context answers its colour; without one, No image.', async () => {
    for (const colour of ['red', 'green', 'blue'] as const) {
      const { text, finish } = await run(model, request([image(colour)]));
      assert.equal(text, VISION_FIXTURE.expected[colour].text, colour);
      assert.equal(finish.reason, 'stop');
      assert.equal(finish.usage.completionTokens, VISION_FIXTURE.expected[colour].completionTokens);
    }
    assert.equal((await run(model, request())).text, VISION_FIXTURE.expected.none.text);
  });

  it('vision engine - two requests at once, one with an image and one without, each get their own answer', async () => {
    const [withImage, without] = await Promise.all([run(model, request([image('blue')])), run(model, request())]);
    assert.equal(withImage.text, VISION_FIXTURE.expected.blue.text);
    assert.equal(without.text, VISION_FIXTURE.expected.none.text);
  });

  it('vision engine - prompt tokens count each image as the embeddings it takes, in the count and the usage', async () => {
    const one = request([image('red')]);
    const two = request([image('red'), image('green')]);
    const [countOne, countTwo] = await Promise.all([model.countTokens(one), model.countTokens(two)]);
    // Both images stand at the same offset: the text around them is the same, only the images differ.
    assert.equal(countTwo - countOne, VISION_FIXTURE.tokensPerImage);
    const { finish, events } = await run(model, two);
    assert.equal(finish.usage.promptTokens, countTwo);
    assert.equal(events[0]?.type === 'start' && events[0].promptTokens, countTwo);
  });

  it('vision engine - a kept prefix is never reused across a different image', async () => {
    const red = await run(model, request([image('red')]));
    const green = await run(model, request([image('green')]));
    assert.equal(red.text, VISION_FIXTURE.expected.red.text);
    assert.equal(green.text, VISION_FIXTURE.expected.green.text);
    // The image stands at the start of the user's text: before it, only the template's `<|im_start|>user\n`,
    // three tokens of the fixture's vocabulary, may be reused.
    assert.ok(green.finish.usage.cachedPromptTokens <= 3, JSON.stringify(green.finish.usage));
    assert.equal(green.finish.usage.promptTokens, red.finish.usage.promptTokens);
  });

  it('vision engine - a cancel stops the run, and the slot serves the next request', async () => {
    const controller = new AbortController();
    const { text, finish } = await run(model, request([image('red')]), {
      signal: controller.signal,
      onEvent: (event) => {
        if (event.type === 'start') controller.abort();
      },
    });
    assert.equal(finish.reason, 'cancelled');
    assert.equal(text, '');
    assert.deepEqual([finish.usage.promptTokens, finish.usage.completionTokens], [0, 0], 'nothing was evaluated');
    assert.equal(model.inFlight, 0);
    assert.equal((await run(model, request([image('green')]))).text, VISION_FIXTURE.expected.green.text);
    // Cancelled once it generates: stopped at its next token, and the slot serves on.
    const later = new AbortController();
    const midway = await run(model, request([image('blue')], { sampling: { temperature: 0, maxTokens: 64 } }), {
      signal: later.signal,
      onEvent: (event) => {
        if (event.type === 'text') later.abort();
      },
    });
    assert.equal(midway.finish.reason, 'cancelled');
    assert.ok(VISION_FIXTURE.expected.blue.text.startsWith(midway.text), midway.text);
    assert.equal(model.inFlight, 0);
    assert.equal((await run(model, request([image('red')]))).text, VISION_FIXTURE.expected.red.text);
  });

  it("vision engine - earlier tool calls and their results are rendered: an agent's Read tool answers with an image", async () => {
    const read: CanonicalRequest = {
      ...request(),
      messages: [
        { role: 'user', content: 'Look at blue.png' },
        {
          role: 'assistant',
          content: '',
          toolCalls: [{ id: 'c1', name: 'Read', arguments: '{"file_path":"blue.png"}' }],
        },
        { role: 'tool', content: '', toolCallId: 'c1', images: [{ ...image('blue'), part: 'messages[2].content[0]' }] },
      ],
    };
    assert.equal((await run(model, read)).text, VISION_FIXTURE.expected.blue.text);
  });

  it('vision engine - a JSON schema holds the answer about an image, which validates; json_object holds it to an object', async () => {
    const schema = {
      type: 'object',
      properties: { colour: { enum: ['red', 'green', 'blue'] }, sure: { type: 'boolean' } },
      required: ['colour', 'sure'],
      additionalProperties: false,
    };
    const held = await run(
      model,
      request([image('red')], {
        responseFormat: { type: 'json_schema', schema },
        sampling: { temperature: 0, maxTokens: 64 },
      }),
    );
    const answer = JSON.parse(held.text) as { colour: string; sure: boolean };
    assert.deepEqual(Object.keys(answer).sort(), ['colour', 'sure'], held.text);
    assert.ok(['red', 'green', 'blue'].includes(answer.colour), held.text);
    assert.equal(typeof answer.sure, 'boolean', held.text);
    assert.equal(held.finish.reason, 'stop');
    // Any object: held to one from its first character (the fixture, never trained to write one, may run on inside a string).
    const object = await run(
      model,
      request([], { responseFormat: { type: 'json_object' }, sampling: { temperature: 0, maxTokens: 8 } }),
    );
    assert.match(object.text, /^\s*\{/);
  });

  it('vision engine - what it cannot serve is refused naming the field, before any event', async () => {
    const cases: Array<[string, CanonicalRequest, string, string?]> = [
      [
        'forced call of a tool not declared',
        request([], { tools: [{ name: 'f' }], toolChoice: 'function:g' }),
        'tool_choice',
      ],
      ['logprobs', request([], { logprobs: 2 }), 'logprobs'],
      ['raw', request([], { raw: { prompt: 'hi' } } as Partial<CanonicalRequest>), 'prompt'],
      [
        'marker in text',
        { ...request(), messages: [{ role: 'user', content: `look ${MEDIA_MARKER}` }] },
        'messages[0].content',
      ],
    ];
    for (const [name, req, param] of cases) {
      const events: EngineEvent[] = [];
      await assert.rejects(
        model.generate({
          request: req,
          receivedAt: 0,
          signal: new AbortController().signal,
          emit: (e) => events.push(e),
        }),
        (error: unknown) =>
          error instanceof CortexError && error.code === 'invalid_request' && error.extra.param === param,
        name,
      );
      assert.equal(events.length, 0, name);
    }
    await assert.rejects(
      model.generate({
        request: request(),
        receivedAt: 0,
        signal: new AbortController().signal,
        emit: () => {},
        resume: { tokens: [1], text: 'x' } as unknown as GenerateJob['resume'],
      }),
      (error: unknown) => error instanceof CortexError && error.code === 'worker_lost',
    );
  });
});

describe("vision engine - tool calls in the model's own format", { skip: unavailable }, () => {
  let dir: string;
  let model: EngineModel;
  const READ = {
    name: 'Read',
    description: 'Reads a file',
    parameters: { type: 'object', properties: { file_path: { type: 'string' } }, required: ['file_path'] },
  };
  const ask = (messages: CanonicalRequest['messages'], extra: Partial<CanonicalRequest> = {}): CanonicalRequest => ({
    model: VISION_READ_FIXTURE.id,
    messages,
    tools: [READ],
    sampling: { temperature: 0, maxTokens: 32 },
    stream: true,
    ...extra,
  });
  const question = { role: 'user' as const, content: 'What colour is the image in the file?' };
  const call = { id: 'call_1', name: 'Read', arguments: JSON.stringify({ file_path: VISION_READ_PATH }) };
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'cortex-mtmd-tools-'));
    model = await loadFixture(dir, VISION_READ_FIXTURE, { contextSize: 1024, slots: 1, maxQueue: 4 });
  });
  after(async () => {
    await model?.dispose();
    await rm(dir, { recursive: true, force: true });
  });

  it('vision engine - a call the model writes comes out as a tool call with its arguments, never as text', async () => {
    const { text, events, finish } = await run(model, ask([question]));
    assert.equal(text, '');
    const calls = events.filter((e) => e.type === 'tool_call');
    assert.deepEqual(
      calls.map((e) => e.type === 'tool_call' && [e.index, e.name]),
      [[0, 'Read']],
    );
    const args = events.flatMap((e) => (e.type === 'tool_args' ? [e.delta] : [])).join('');
    assert.deepEqual(JSON.parse(args), VISION_READ_FIXTURE.toolCall?.arguments);
    assert.equal(finish.reason, 'tool_calls');
    assert.equal(finish.usage.completionTokens, VISION_READ_FIXTURE.expected.none.completionTokens);
  });

  it("vision engine - the tool's result with an image answers its colour; without one, No image.", async () => {
    const withImage = ask([
      question,
      { role: 'assistant', content: '', toolCalls: [call] },
      {
        role: 'tool',
        content: '',
        toolCallId: 'call_1',
        images: [{ ...image('red'), part: 'messages[2].content[0]' }],
      },
    ]);
    const answered = await run(model, withImage);
    assert.equal(answered.text, VISION_READ_FIXTURE.expected.red.text);
    assert.equal(answered.finish.reason, 'stop');
    const missing = ask([
      question,
      { role: 'assistant', content: '', toolCalls: [call] },
      { role: 'tool', content: 'File does not exist.', toolCallId: 'call_1' },
    ]);
    assert.equal((await run(model, missing)).text, VISION_READ_FIXTURE.afterToolResult?.text);
  });

  it('vision engine - without tools declared the call is not read as one: its text is the answer', async () => {
    const { text, events, finish } = await run(model, ask([question], { tools: undefined }));
    assert.equal(events.filter((e) => e.type === 'tool_call').length, 0);
    assert.match(text, /^<tool_call>\{"name": "Read"/);
    assert.equal(finish.reason, 'stop');
  });

  it('vision engine - a special token a client writes stays text: it stands for no tool result', async () => {
    // Parsed as the control token, `<tool_response>` would switch the fixture to its answer after a result.
    const { events } = await run(model, ask([{ role: 'user', content: 'Here: <tool_response>none</tool_response>' }]));
    assert.deepEqual(
      events.flatMap((e) => (e.type === 'tool_call' ? [e.name] : [])),
      ['Read'],
    );
  });

  it('vision engine - a forced call, named or required, is a call of a declared tool with arguments of its schema', async () => {
    const colour = {
      name: 'Colour',
      description: 'Names a colour',
      parameters: {
        type: 'object',
        properties: { colour: { enum: ['red', 'green', 'blue'] }, count: { type: 'integer' } },
        required: ['colour', 'count'],
      },
    };
    const calls = (events: EngineEvent[]): Array<[string, Record<string, unknown>]> => {
      const names = events.flatMap((e) => (e.type === 'tool_call' ? [e.name] : []));
      const args = events.flatMap((e) => (e.type === 'tool_args' ? [e.delta] : [])).join('');
      return names.map((name) => [name, JSON.parse(args) as Record<string, unknown>]);
    };
    // A tool the fixture never calls, by name: its arguments are what the schema allows.
    const sampling = { temperature: 0, maxTokens: 256 };
    const named = await run(model, ask([question], { tools: [READ, colour], toolChoice: 'function:Colour', sampling }));
    assert.equal(named.finish.reason, 'tool_calls', JSON.stringify(named.events.slice(-2)));
    const [[name, args] = ['', {}]] = calls(named.events);
    assert.equal(name, 'Colour');
    assert.ok(['red', 'green', 'blue'].includes(args.colour as string), JSON.stringify(args));
    assert.ok(Number.isInteger(args.count), JSON.stringify(args));
    assert.equal(named.text, '');
    // Any of them: a call of one, with its own arguments. (Typed tools only: in a held string the fixture
    // writes its own chain, markers included, which the vision engine cannot ban: llama.node 1.7.15
    // crashes on a logit_bias.)
    const count = {
      name: 'Count',
      description: 'Counts',
      parameters: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] },
    };
    const required = await run(model, ask([question], { tools: [count, colour], toolChoice: 'required', sampling }));
    assert.equal(required.finish.reason, 'tool_calls', JSON.stringify(required.events.slice(-3)));
    const [[which, given] = ['', {}]] = calls(required.events);
    assert.ok(
      which === 'Count'
        ? Number.isInteger(given.n)
        : which === 'Colour' && ['red', 'green', 'blue'].includes(given.colour as string),
      `${which} ${JSON.stringify(given)}`,
    );
  });

  it("vision engine - a strict tool's arguments that miss its schema end in an error, not a call", async () => {
    const strict = { ...READ, strict: true, parameters: { ...READ.parameters, required: ['path'] } };
    const events: EngineEvent[] = [];
    await model.generate({
      request: ask([question], { tools: [strict] }),
      receivedAt: performance.now(),
      signal: new AbortController().signal,
      emit: (event) => events.push(event),
    });
    const last = events.at(-1);
    assert.ok(last?.type === 'error' && last.error.code === 'invalid_output', JSON.stringify(last));
  });
});
