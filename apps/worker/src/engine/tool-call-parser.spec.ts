import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { StreamEventBody } from '@cortex/contracts';
import { JsonEnd, ToolCallParser } from './tool-call-parser.js';

function parse(pieces: string[], declared: readonly string[] = ['get_weather', 'lookup', 'f']): { events: StreamEventBody[]; ok: boolean } {
  const events: StreamEventBody[] = [];
  const parser = new ToolCallParser(0, 'call_1', (event) => events.push(event), new Set(declared));
  for (const piece of pieces) parser.push(piece);
  return { events, ok: parser.end() };
}

const args = (events: StreamEventBody[]): string => events.flatMap((e) => (e.type === 'tool_args' ? [e.delta] : [])).join('');

describe('tool call parser', () => {
  it('tool call parser - streams the name first, then argument deltas without the closing brace', () => {
    const { events, ok } = parse(['{"name": "get_', 'weather", "arguments": ', '{"city": "', 'Paris"}', '}']);
    assert.equal(ok, true);
    assert.deepEqual(events[0], { type: 'tool_call', index: 0, id: 'call_1', name: 'get_weather' });
    assert.ok(events.filter((e) => e.type === 'tool_args').length >= 2, 'arguments arrive in pieces');
    assert.deepEqual(JSON.parse(args(events)), { city: 'Paris' });
  });

  it('tool call parser - a call split one character at a time still parses', () => {
    const text = '{ "name" : "lookup", "arguments" : {"q": "a}b", "n": [1, {"x": 2}]} }\n';
    const { events, ok } = parse([...text]);
    assert.equal(ok, true);
    assert.equal(events[0]?.type === 'tool_call' && events[0].name, 'lookup');
    assert.deepEqual(JSON.parse(args(events)), { q: 'a}b', n: [1, { x: 2 }] });
  });

  it('tool call parser - arguments before name are parsed whole at the end', () => {
    const { events, ok } = parse(['{"arguments": {"a": 1}, "name": "f"}']);
    assert.equal(ok, true);
    assert.deepEqual(events, [
      { type: 'tool_call', index: 0, id: 'call_1', name: 'f' },
      { type: 'tool_args', index: 0, delta: '{"a":1}' },
    ]);
  });

  it('tool call parser - malformed calls degrade to text', () => {
    const { events, ok } = parse(['not json at all']);
    assert.equal(ok, false);
    assert.deepEqual(events, [{ type: 'text', text: '<tool_call>not json at all</tool_call>' }]);
  });

  it('tool call parser - a call to a tool the request did not declare is text, streamed or whole', () => {
    const pieces = ['{"name": "get_', 'weather", "arguments": ', '{"city": "', 'Paris"}', '}'];
    for (const declared of [[], ['lookup']]) {
      const { events, ok } = parse(pieces, declared);
      assert.equal(ok, false);
      assert.deepEqual(events, [{ type: 'text', text: `<tool_call>${pieces.join('')}</tool_call>` }]);
    }
    const whole = parse(['{"arguments": {"a": 1}, "name": "f"}'], ['g']);
    assert.equal(whole.ok, false);
    assert.deepEqual(whole.events, [{ type: 'text', text: '<tool_call>{"arguments": {"a": 1}, "name": "f"}</tool_call>' }]);
  });

  it('tool call parser - an undeclared call cut short comes back as the text written', () => {
    const events: StreamEventBody[] = [];
    const parser = new ToolCallParser(0, 'call_1', (event) => events.push(event), new Set());
    parser.push('{"name": "get_weather", "arguments": {"ci');
    parser.abandon();
    assert.deepEqual(events, [{ type: 'text', text: '<tool_call>{"name": "get_weather", "arguments": {"ci' }]);
  });
});

describe('json end', () => {
  it('json end - closes with the top-level object, not with braces inside strings or nested objects', () => {
    const end = new JsonEnd();
    const pieces = ['{"name": "a}b', '\\"}", "arguments": {"q": "{[', ']"}', '}'];
    assert.deepEqual(pieces.map((piece) => end.push(piece)), [false, false, false, true]);
  });

  it('json end - white space before the object is not an end', () => {
    const end = new JsonEnd();
    assert.equal(end.push('  \n'), false);
    assert.equal(end.push('{}'), true);
  });
});
