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
 * The real engine on the family fixtures whose calls are tags (Qwen3-Coder's `<parameter=K>`, GLM's
 * `<arg_key>`): a named tool the fixture would not call itself is called, with arguments of its schema
 * by the grammar built from the format's description (the fixture's own forced calls are in
 * family-fixtures.spec.ts), and a call left to the model is held by the same grammar.
 */
const TAGGED = FAMILY_FIXTURES.filter((fixture) => ['qwen3-coder', 'glm-4.5'].includes(fixture.format));

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
    properties: { days: { type: 'integer' }, metric: { type: 'boolean' }, unit: { enum: ['C', 'F'] } },
    required: ['days', 'metric', 'unit'],
  },
};

describe('tagged calls held by their grammar', () => {
  let dir: string;
  let engine: LlamaEngine;
  const models = new Map<string, EngineModel>();

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'cortex-tagged-'));
    const paths = await ensureFamilyFixtures(dir, { ids: TAGGED.map((fixture) => fixture.id) });
    engine = await LlamaEngine.create({ gpu: 'cpu', threads: 1, log: () => undefined });
    for (const { id } of TAGGED)
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

  for (const fixture of TAGGED) {
    it(`tagged calls - ${fixture.family}: a named tool it would not call is called: integer, boolean and enum as typed`, async () => {
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

    it(`tagged calls - ${fixture.family}: left to choose, its own call is held by the grammar, and comes out as written`, async () => {
      const run = await calls(fixture.id, [weather], 'auto');
      assert.deepEqual(run.calls, [['get_weather', { city: 'Paris' }]], JSON.stringify(run));
    });
  }
});
