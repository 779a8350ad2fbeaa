import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { CanonicalRequest, ToolDefinition } from '@cortex/contracts';
import { ensureFamilyFixtures, FAMILY_FIXTURES } from '@cortex/fixtures';
import type { EngineEvent, EngineModel } from './engine.types.js';
import { LlamaEngine } from './llama-engine.js';

/**
 * The real engine on the family fixtures whose calls are held whole (tags: Qwen3-Coder's
 * `<parameter=K>`, GLM's `<arg_key>`, MiniMax's `<parameter name="K">`; DeepSeek R1's fenced JSON,
 * Gemma 4's dict, LFM2's pythonic list): a named tool the fixture would not call itself is called,
 * with arguments of its schema by the grammar built from the format's description (the fixture's own
 * forced calls are in family-fixtures.spec.ts), and a call left to the model is held by the same
 * grammar where its opening marker is one token outside any section.
 */
const WHOLE = FAMILY_FIXTURES.filter((fixture) =>
  ['qwen3-coder', 'glm-4.5', 'minimax-m2', 'deepseek-r1', 'gemma4', 'lfm2'].includes(fixture.format),
);
/** Formats whose calls sit in a section: a call the model opens itself is parsed as written, not held. */
const SECTIONED = ['minimax-m2', 'deepseek-r1'];

const weather: ToolDefinition = {
  name: 'get_weather',
  description: 'The weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};
/**
 * A tool the fixtures never call, of typed parameters only: what the grammar leaves a fixture to choose
 * is bounded (digits, true or false), where free text would run on as a fixture that was not trained
 * for the call writes its own chain into it.
 */
const forecast: ToolDefinition = {
  name: 'forecast',
  description: 'The forecast, some days ahead',
  parameters: {
    type: 'object',
    properties: { days: { type: 'integer' }, metric: { type: 'boolean' }, unit: { type: 'string', enum: ['C', 'F'] } },
    required: ['days', 'metric', 'unit'],
  },
};

describe('whole calls held by their grammar', () => {
  let dir: string;
  let engine: LlamaEngine;
  const models = new Map<string, EngineModel>();

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'cortex-whole-'));
    const paths = await ensureFamilyFixtures(dir, { ids: WHOLE.map((fixture) => fixture.id) });
    engine = await LlamaEngine.create({ gpu: 'cpu', threads: 1, log: () => undefined });
    for (const { id } of WHOLE)
      models.set(id, await engine.load({ id, path: paths[id] as string, contextSize: 4096, slots: 1, maxQueue: 4 }));
  });

  after(async () => {
    for (const model of models.values()) await model.dispose();
    await engine?.dispose();
    await rm(dir, { recursive: true, force: true });
  });

  /** The calls of one run, their arguments parsed, and how it finished. */
  async function calls(
    model: string,
    tools: ToolDefinition[],
    toolChoice: CanonicalRequest['toolChoice'],
  ): Promise<{ calls: Array<[string, unknown]>; reason: string; text: string }> {
    const events: EngineEvent[] = [];
    const request: CanonicalRequest = {
      model,
      messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
      sampling: { temperature: 0, maxTokens: 200 },
      stream: false,
      tools,
      toolChoice,
    };
    await (models.get(model) ?? assert.fail(model)).generate({
      request,
      receivedAt: performance.now(),
      signal: new AbortController().signal,
      emit: (event) => events.push(event),
    });
    const names: string[] = [];
    const args: string[] = [];
    let text = '';
    let reason = '';
    for (const event of events) {
      if (event.type === 'tool_call') names[event.index] = event.name;
      if (event.type === 'tool_args') args[event.index] = (args[event.index] ?? '') + event.delta;
      if (event.type === 'text') text += event.text;
      if (event.type === 'finish') reason = event.reason;
    }
    return { calls: names.map((name, i) => [name, JSON.parse(args[i] ?? '{}') as unknown]), reason, text };
  }

  for (const fixture of WHOLE) {
    it(`whole calls - ${fixture.family}: a named tool it would not call is called: integer, boolean and enum as typed`, async () => {
      const run = await calls(fixture.id, [weather, forecast], 'function:forecast');
      assert.equal(run.reason, 'tool_calls', JSON.stringify(run));
      assert.equal(run.calls.length, 1, JSON.stringify(run));
      const [name, args] = run.calls[0] as [string, Record<string, unknown>];
      assert.equal(name, 'forecast');
      assert.equal(typeof args.days, 'number', JSON.stringify(args));
      assert.ok(Number.isInteger(args.days), JSON.stringify(args));
      assert.equal(typeof args.metric, 'boolean', JSON.stringify(args));
      assert.ok(args.unit === 'C' || args.unit === 'F', JSON.stringify(args));
      assert.deepEqual(Object.keys(args), ['days', 'metric', 'unit']);
    });

    const held = SECTIONED.includes(fixture.format) ? 'is parsed' : 'is held by the grammar, and comes out';
    it(`whole calls - ${fixture.family}: left to choose, its own call ${held} as written`, async () => {
      const run = await calls(fixture.id, [weather], 'auto');
      assert.deepEqual(run.calls, [['get_weather', { city: 'Paris' }]], JSON.stringify(run));
    });
  }
});
