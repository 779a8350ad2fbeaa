import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { CanonicalRequest, ToolDefinition } from '@cortex/contracts';
import { callHoldOf, forcedStart, forcedTools, type CallHolding } from './call-hold.js';
import type { ChatFormat } from './formats/chat-format.js';
import { FORMATS, type FormatId } from './formats/families.js';

const everyMarker = (): boolean => true;

const weather: ToolDefinition = { name: 'get_weather', parameters: { type: 'object' } };
const time: ToolDefinition = { name: 'get_time', parameters: { type: 'object' } };

function request(toolChoice: CanonicalRequest['toolChoice'], tools = [weather, time]): CanonicalRequest {
  return {
    model: 'm',
    messages: [{ role: 'user', content: 'hi' }],
    sampling: {},
    stream: false,
    tools,
    toolChoice,
  };
}

describe('call hold', () => {
  it('call hold - what a grammar holds of each format, and whether a call the model opens is held', () => {
    const table: ReadonlyArray<[FormatId, CallHolding]> = [
      ['hermes', { hold: 'call', auto: true }],
      ['nemotron-v2', { hold: 'call', auto: true }],
      ['granite', { hold: 'call', auto: true }],
      ['command-r7b', { hold: 'call', auto: true }],
      ['apertus', { hold: 'call', auto: true }],
      ['mistral', { hold: 'arguments', auto: true }],
      ['deepseek-v3.1', { hold: 'arguments', auto: true }],
      ['kimi-k2', { hold: 'arguments', auto: true }],
      ['gpt-oss', { hold: 'arguments', auto: true }],
      ['qwen3-coder', { hold: 'whole', auto: true }],
      ['glm-4.5', { hold: 'whole', auto: true }],
      ['gemma4', { hold: 'whole', auto: true }],
      ['lfm2', { hold: 'whole', auto: true }],
      // In a section: held only when forced, from the section's opening.
      ['minimax-m2', { hold: 'whole', auto: false }],
      ['deepseek-r1', { hold: 'whole', auto: false }],
      // The whole answer: held only when forced, by the output's grammar.
      ['llama3', { hold: null, auto: false }],
      ['plain', { hold: null, auto: false }],
    ];
    for (const [id, holding] of table) assert.deepEqual(callHoldOf(FORMATS[id], everyMarker), holding, id);
  });

  it('call hold - a marker of several tokens: JSON calls are not held, a whole call only when forced', () => {
    const several = (marker: string) => (text: string) => text !== marker;
    assert.deepEqual(callHoldOf(FORMATS.hermes, several('<tool_call>')), { hold: null, auto: false });
    assert.deepEqual(callHoldOf(FORMATS['qwen3-coder'], several('<tool_call>')), { hold: 'whole', auto: false });
    // A name's end of several tokens leaves Kimi's arguments to a whole call's grammar.
    assert.deepEqual(callHoldOf(FORMATS['kimi-k2'], several('<|tool_call_argument_begin|>')), {
      hold: 'whole',
      auto: false,
    });
  });

  it('call hold - how a forced call starts: what cortex writes, and where the grammar starts holding', () => {
    const one = [weather];
    const start = (id: FormatId, reasoning: boolean) =>
      forcedStart(
        one,
        request('function:get_weather', one),
        FORMATS[id],
        callHoldOf(FORMATS[id], everyMarker).hold,
        reasoning,
      );
    const table: ReadonlyArray<[FormatId, boolean, ReturnType<typeof forcedStart>]> = [
      ['hermes', false, { text: '<tool_call>', from: 'call' }],
      ['hermes', true, { text: '</think><tool_call>', from: 'call' }],
      ['qwen3-coder', false, { text: '<tool_call>', from: 'call' }],
      ['lfm2', false, { text: '<|tool_call_start|>', from: 'call' }],
      ['minimax-m2', false, { text: '<minimax:tool_call>', from: 'section' }],
      // Inside its reasoning the model finishes it; the grammar writes the openings.
      ['minimax-m2', true, { text: null, from: 'answer' }],
      ['deepseek-r1', true, { text: null, from: 'answer' }],
      ['mistral', false, { text: '[TOOL_CALLS]get_weather[ARGS]', from: 'call' }],
      [
        'gpt-oss',
        false,
        { text: '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>', from: 'call' },
      ],
      ['llama3', false, { text: null, from: 'call' }],
    ];
    for (const [id, reasoning, expected] of table)
      assert.deepEqual(start(id, reasoning), expected, `${id}${reasoning ? ' in reasoning' : ''}`);
    const kimi = { ...request('function:get_weather', one) };
    kimi.messages = [
      {
        role: 'assistant',
        content: '',
        toolCalls: [{ id: 'functions.get_weather:0', name: 'get_weather', arguments: '{}' }],
      },
      { role: 'tool', content: 'sunny', toolCallId: 'functions.get_weather:0' },
      { role: 'user', content: 'again' },
    ];
    assert.equal(
      forcedStart(one, kimi, FORMATS['kimi-k2'], 'arguments', false).text,
      '<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>',
    );
  });

  it('call hold - the tools a request forces, or a 400 naming tool_choice', () => {
    const model = (id: FormatId) => ({
      id: 'm',
      format: FORMATS[id] as ChatFormat,
      holding: callHoldOf(FORMATS[id], everyMarker),
      callsTools: id !== 'plain',
    });
    assert.equal(forcedTools(request('auto'), model('hermes')), null);
    assert.equal(forcedTools(request(undefined), model('hermes')), null);
    assert.deepEqual(forcedTools(request('required'), model('minimax-m2')), [weather, time]);
    assert.deepEqual(forcedTools(request('function:get_time'), model('lfm2')), [time]);
    assert.deepEqual(forcedTools(request('required', [weather]), model('mistral')), [weather]);
    const refused = (choice: CanonicalRequest['toolChoice'], id: FormatId, message: RegExp): void =>
      assert.throws(
        () => forcedTools(request(choice), model(id)),
        (error: Error & { extra?: { param?: string } }) => {
          assert.equal(error.extra?.param, 'tool_choice');
          assert.match(error.message, message);
          return true;
        },
      );
    refused('required', 'mistral', /forces one named tool at a time; name the function to call/);
    refused('function:get_news', 'hermes', /is asked for 'get_news', which is not in tools; name a declared tool/);
    refused('required', 'plain', /writes no tool calls cortex can parse/);
  });
});
