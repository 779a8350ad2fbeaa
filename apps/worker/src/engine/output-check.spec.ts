import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { CanonicalRequest, FinishReason } from '@cortex/contracts';
import { OutputCheck } from './output-check.js';
import type { EngineEvent } from './engine.types.js';

const usage = { promptTokens: 1, cachedPromptTokens: 0, completionTokens: 1, reasoningTokens: 0 };
const timings = { ttftMs: 1, promptMs: 1, decodeTokensPerSecond: 1, durationMs: 1, queueMs: 0 };
const finish = (reason: FinishReason): EngineEvent => ({ type: 'finish', reason, usage, timings });

const schema = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  type: 'object',
  properties: { population: { type: 'integer', minimum: 0 }, area: { type: 'number' } },
  required: ['population', 'area'],
  additionalProperties: false,
};

function request(extra: Partial<CanonicalRequest>): CanonicalRequest {
  return { model: 'm', messages: [{ role: 'user', content: 'x' }], sampling: {}, stream: false, ...extra };
}

/** The events that leave the check when `events` go in. */
function run(req: CanonicalRequest, events: EngineEvent[]): EngineEvent[] {
  const out: EngineEvent[] = [];
  const check = new OutputCheck(req, (event) => out.push(event));
  for (const event of events) check.emit(event);
  return out;
}

const last = (events: EngineEvent[]): EngineEvent | undefined => events.at(-1);

describe('output check', () => {
  const structured = request({ responseFormat: { type: 'json_schema', schema } });

  it('output check - output that matches the schema finishes as it was', () => {
    const out = run(structured, [
      { type: 'text', text: '{"population": 6904, ' },
      { type: 'text', text: '"area": 105.4}' },
      finish('stop'),
    ]);
    assert.deepEqual(last(out), finish('stop'));
    assert.equal(out.length, 3);
  });

  it('output check - a mismatch is an invalid_output error in place of the finish, naming the field', () => {
    for (const [text, pattern] of [
      ['{"population": 1.5, "area": 1}', /output\/population must be integer/],
      ['{"population": -3, "area": 1}', /output\/population must be >= 0/],
      ['{"population": 3}', /must have required property 'area'/],
      ['{"population": 3, "area": 1', /not JSON/],
    ] as const) {
      const out = run(structured, [{ type: 'text', text }, finish('stop')]);
      const error = last(out);
      assert.equal(error?.type, 'error', text);
      assert.equal(error?.type === 'error' && error.error.code, 'invalid_output');
      assert.match(error?.type === 'error' ? error.error.message : '', pattern);
      assert.ok(!out.some((e) => e.type === 'finish'), 'no finish once failed');
    }
  });

  it('output check - output cut short is left to its finish reason', () => {
    assert.deepEqual(last(run(structured, [{ type: 'text', text: '{"popu' }, finish('length')])), finish('length'));
    assert.deepEqual(
      last(run(structured, [{ type: 'text', text: '{"popu' }, finish('cancelled')])),
      finish('cancelled'),
    );
  });

  it('output check - json_object output must be JSON', () => {
    const req = request({ responseFormat: { type: 'json_object' } });
    assert.deepEqual(last(run(req, [{ type: 'text', text: '[1, {"a": null}]' }, finish('stop')])), finish('stop'));
    const out = run(req, [{ type: 'text', text: 'Hello' }, finish('stop')]);
    assert.match(
      last(out)?.type === 'error' ? (last(out) as { error: { message: string } }).error.message : '',
      /JSON format: it is not JSON/,
    );
  });

  it("output check - a strict tool's call that misses its parameters is invalid_output; another tool's is returned, with a warning", () => {
    const parameters = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };
    const call = (name: string, args: string): EngineEvent[] => [
      { type: 'tool_call', index: 0, id: 'c', name },
      { type: 'tool_args', index: 0, delta: args.slice(0, 3) },
      { type: 'tool_args', index: 0, delta: args.slice(3) },
      finish('tool_calls'),
    ];
    const cases: Array<{ name: string; strict: boolean; args: string; error?: RegExp; warning?: RegExp }> = [
      { name: 'strict, matching', strict: true, args: '{"city": "Paris"}' },
      { name: 'not strict, matching', strict: false, args: '{"city": "Paris"}' },
      {
        name: 'strict, missing a field',
        strict: true,
        args: '{"town": "Paris"}',
        error: /tool call 0 \(get_weather\).*required property 'city'/,
      },
      {
        name: 'not strict, missing a field',
        strict: false,
        args: '{"town": "Paris"}',
        warning: /tool call 0 \(get_weather\).*required property 'city'.*returned as written/,
      },
    ];
    for (const { name, strict, args, error, warning } of cases) {
      const req = request({
        tools: [{ name: 'get_weather', parameters, ...(strict && { strict }) }, { name: 'free' }],
      });
      const out: EngineEvent[] = [];
      const warnings: string[] = [];
      const check = new OutputCheck(
        req,
        (event) => out.push(event),
        (message) => warnings.push(message),
      );
      for (const event of call('get_weather', args)) check.emit(event);
      if (error) {
        assert.equal(
          last(out)?.type === 'error' && (last(out) as { error: { code: string } }).error.code,
          'invalid_output',
          name,
        );
        assert.match((last(out) as { error: { message: string } }).error.message, error, name);
      } else assert.deepEqual(last(out), finish('tool_calls'), name);
      if (warning) {
        assert.equal(warnings.length, 1, name);
        assert.match(warnings[0] ?? '', warning, name);
      } else assert.deepEqual(warnings, [], name);
    }
    // A tool without parameters takes anything.
    assert.deepEqual(
      last(
        run(
          request({ tools: [{ name: 'free' }, { name: 'get_weather', parameters }] }),
          call('free', '{"anything": 1}'),
        ),
      ),
      finish('tool_calls'),
    );
  });

  it('output check - a request with neither format nor tool schemas is not checked', () => {
    assert.equal(new OutputCheck(request({}), () => undefined).active, false);
    assert.equal(new OutputCheck(request({ tools: [{ name: 'free' }] }), () => undefined).active, false);
    assert.equal(new OutputCheck(request({ responseFormat: { type: 'text' } }), () => undefined).active, false);
  });
});
