/**
 * Conformance against the OpenResponses OpenAPI document (`shared/specs/openresponses-openapi.json`, beside
 * the repository): ajv (draft 2020-12) compiles its `components.schemas`, and the codec's resources, stream
 * frames and accepted request bodies are validated against them.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Ajv2020 from 'ajv/dist/2020.js';
import { decodeResponsesRequest } from './responses.decoder.js';
import { aggregate, encodeAll, encoderOptions, requestBody, scripts, type ScriptName } from './responses.fixtures.js';
import type { ResponsesFrame } from './responses.types.js';

const SPEC = join('shared', 'specs', 'openresponses-openapi.json');

/** The spec lives in `shared/` beside the repository (or anywhere above this file); an env var may point at it. */
function specPath(): string {
  const fromEnv = process.env.OPENRESPONSES_SPEC;
  if (fromEnv) return fromEnv;
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    for (const candidate of [join(dir, SPEC), join(dir, '..', SPEC)]) if (existsSync(candidate)) return candidate;
    const parent = dirname(dir);
    if (parent === dir)
      throw new Error(`${SPEC} not found above ${fileURLToPath(import.meta.url)}: set OPENRESPONSES_SPEC`);
    dir = parent;
  }
}

type Schema = Record<string, unknown>;
const doc = JSON.parse(readFileSync(specPath(), 'utf8')) as {
  components: { schemas: Record<string, Schema> };
  paths: Record<string, unknown>;
};
const schemas = doc.components.schemas;
const BASE = 'https://cortex.invalid/openresponses.json';

// strict: false: the document carries OpenAPI keywords (discriminator, example, x-…) ajv does not know.
const ajv = new Ajv2020.default({ strict: false, allErrors: true });
ajv.addSchema({ $id: BASE, components: doc.components, paths: doc.paths });

function validator(pointer: string) {
  const validate = ajv.getSchema(`${BASE}#${pointer}`);
  assert.ok(validate, `no schema at ${pointer}`);
  return validate;
}

function assertValid(pointer: string, value: unknown, label: string): void {
  const validate = validator(pointer);
  const ok = validate(value);
  assert.ok(ok, `${label} is not a valid ${pointer}: ${ajv.errorsText(validate.errors, { separator: '\n' })}`);
}

/** Streaming event schemas by the event type they describe (`properties.type.enum[0]`). */
const eventSchemas = new Map<string, string>();
for (const [name, schema] of Object.entries(schemas)) {
  const type = ((schema.properties as Record<string, { enum?: string[] }> | undefined)?.type?.enum ?? [])[0];
  if (name.endsWith('StreamingEvent') && type) eventSchemas.set(type, name);
}
const STREAM_POINTER = '/paths/~1responses/post/responses/200/content/text~1event-stream/schema';

function assertFramesValid(frames: ResponsesFrame[], label: string): void {
  for (const frame of frames) {
    const name = eventSchemas.get(frame.event);
    assert.ok(name, `${label}: the spec has no schema for ${frame.event}`);
    assertValid(`/components/schemas/${name}`, frame.data, `${label} ${frame.event} #${frame.data.sequence_number}`);
    assertValid(STREAM_POINTER, frame.data, `${label} ${frame.event} #${frame.data.sequence_number}`);
  }
}

const ALL_SCRIPTS = Object.keys(scripts) as ScriptName[];

describe('responses codec - OpenResponses schema conformance (ajv)', () => {
  it('responses codec - the spec names the streaming events the encoder uses', () => {
    for (const type of [
      'response.created',
      'response.in_progress',
      'response.completed',
      'response.incomplete',
      'response.failed',
      'response.output_item.added',
      'response.output_item.done',
      'response.content_part.added',
      'response.content_part.done',
      'response.output_text.delta',
      'response.output_text.done',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.reasoning.delta',
      'response.reasoning.done',
      'error',
    ]) {
      assert.ok(eventSchemas.has(type), type);
    }
    // OpenAI's reasoning_text names are not in the spec.
    assert.equal(eventSchemas.has('response.reasoning_text.delta'), false);
  });

  it('responses codec - final resources validate as ResponseResource (text, reasoning, tool call, incomplete, failed)', () => {
    for (const name of ALL_SCRIPTS) {
      const body = aggregate(scripts[name]);
      assertValid('/components/schemas/ResponseResource', body, `${name} body`);
    }
    // Every setting echoed, including a json_schema text format and allowed_tools.
    const echoed = encoderOptions('openai', {
      ...requestBody,
      text: { format: { type: 'json_schema', name: 'answer', schema: { type: 'object' }, strict: true } },
      tool_choice: { type: 'allowed_tools', mode: 'auto', tools: [{ type: 'function', name: 'weather' }] },
      reasoning: { effort: 'low', summary: 'concise' },
      metadata: { k: 'v' },
      max_output_tokens: 64,
      previous_response_id: 'resp_prev',
    });
    assertValid('/components/schemas/ResponseResource', aggregate(scripts.toolCall, echoed), 'fully echoed body');
    assertValid(
      '/components/schemas/ResponseResource',
      aggregate(
        scripts.text,
        encoderOptions('openai', { ...requestBody, tool_choice: { type: 'function', name: 'weather' } }),
      ),
      'function tool_choice body',
    );
  });

  it("responses codec - with the 'openresponses' family every frame validates against its event schema", () => {
    for (const name of ALL_SCRIPTS) assertFramesValid(encodeAll(scripts[name], encoderOptions('openresponses')), name);
  });

  it("responses codec - with the 'openai' family only the reasoning_text frames fall outside the spec", () => {
    for (const name of ALL_SCRIPTS) {
      const frames = encodeAll(scripts[name], encoderOptions('openai'));
      const outside = frames.filter((frame) => !eventSchemas.has(frame.event));
      assert.ok(
        outside.every(
          (frame) => frame.event === 'response.reasoning_text.delta' || frame.event === 'response.reasoning_text.done',
        ),
        name,
      );
      assertFramesValid(
        frames.filter((frame) => eventSchemas.has(frame.event)),
        name,
      );
    }
  });

  it('responses codec - with a reasoning summary asked for, every frame and resource validates (both families)', () => {
    const body = { ...requestBody, reasoning: { summary: 'auto' } };
    for (const family of ['openai', 'openresponses'] as const) {
      for (const name of ALL_SCRIPTS) {
        const frames = encodeAll(scripts[name], encoderOptions(family, body));
        assertFramesValid(frames, `${family} ${name} with summary`);
        assertValid(
          '/components/schemas/ResponseResource',
          aggregate(scripts[name], encoderOptions(family, body)),
          `${family} ${name} body with summary`,
        );
      }
    }
  });

  it('responses codec - a CreateResponseBody with every spec field validates and decodes', () => {
    const body = {
      model: 'local-model',
      input: [
        { type: 'message', role: 'developer', content: 'Rules.' },
        { type: 'message', role: 'system', content: [{ type: 'input_text', text: 'System.' }] },
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Weather?' }] },
        { type: 'reasoning', summary: [{ type: 'summary_text', text: 'Call the tool.' }] },
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Checking.' }] },
        {
          type: 'function_call',
          call_id: 'call_1',
          name: 'weather',
          arguments: '{"city":"Paris"}',
          status: 'completed',
        },
        { type: 'function_call_output', call_id: 'call_1', output: '18C' },
        { type: 'item_reference', id: 'msg_old_0' },
      ],
      previous_response_id: null,
      include: ['reasoning.encrypted_content'],
      tools: [{ type: 'function', name: 'weather', parameters: { type: 'object' }, strict: true }],
      tool_choice: { type: 'allowed_tools', tools: [{ type: 'function', name: 'weather' }], mode: 'auto' },
      metadata: { trace: 'abc' },
      text: {
        format: { type: 'json_schema', name: 'answer', schema: { type: 'object' }, strict: false },
        verbosity: 'low',
      },
      temperature: 0.7,
      top_p: 0.95,
      presence_penalty: 0,
      frequency_penalty: 0,
      parallel_tool_calls: true,
      stream: true,
      stream_options: { include_obfuscation: false },
      background: false,
      max_output_tokens: 512,
      max_tool_calls: 4,
      reasoning: { effort: 'medium', summary: 'auto' },
      safety_identifier: 'user-hash',
      prompt_cache_key: 'key-1',
      truncation: 'disabled',
      instructions: 'Be brief.',
      store: true,
      service_tier: 'auto',
      top_logprobs: 0,
    };
    const properties = Object.keys(schemas.CreateResponseBody?.properties as Schema);
    assert.deepEqual(
      properties.filter((key) => !(key in body)),
      [],
      'the example covers every CreateResponseBody field',
    );
    assertValid('/components/schemas/CreateResponseBody', body, 'example body');
    const decoded = decodeResponsesRequest(body);
    assert.deepEqual(decoded.itemReferences, ['msg_old_0']);
    assert.deepEqual(
      decoded.request.messages.map((message) => message.role),
      ['system', 'system', 'system', 'user', 'assistant', 'tool'],
    );
    assert.deepEqual(decoded.request.responseFormat, { type: 'json_schema', schema: { type: 'object' } });
    // Normalized input items are valid input items again (what a store serves back or a client resends).
    decoded.input.forEach((item, i) => assertValid('/components/schemas/ItemParam', item, `normalized input[${i}]`));
  });

  it('responses codec - the spec example resource is valid (the validator is not vacuous)', () => {
    const example = (schemas.ResponseResource as { example: Record<string, unknown> }).example;
    const complete: Record<string, unknown> = {
      ...example,
      incomplete_details: null,
      previous_response_id: null,
      instructions: null,
      error: null,
      max_output_tokens: null,
      max_tool_calls: null,
      safety_identifier: null,
      prompt_cache_key: null,
      reasoning: null,
    };
    assertValid('/components/schemas/ResponseResource', complete, 'spec example');
    const { usage: _usage, ...missing } = complete;
    assert.equal(validator('/components/schemas/ResponseResource')(missing), false);
  });
});
