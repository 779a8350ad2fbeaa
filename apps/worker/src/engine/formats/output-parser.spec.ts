import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { fingerprint, FORMATS, formatById } from './families.js';
import { cut, parseOutput } from './parse-output.js';
import { parsePythonic } from './pythonic-calls.js';
import { convertValue } from './tagged-args.js';
import type { ChatFormat } from './chat-format.js';

const WEATHER = { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } } };
const TOOLS = new Map<string, Record<string, unknown> | undefined>([
  ['get_weather', WEATHER],
  ['get_time', { type: 'object', properties: { tz: { type: 'string' } } }],
]);

/** Parsed whole, then cut at every character count from 1 to 9: every way must add up to the same. */
function streamed(format: ChatFormat, text: string, options: Parameters<typeof parseOutput>[2] = {}) {
  const whole = parseOutput(format, [text], options).output;
  for (let size = 1; size < Math.min(10, text.length); size++) {
    assert.deepEqual(parseOutput(format, cut(text, size), options).output, whole, `${format.id} cut every ${size}`);
  }
  return whole;
}

describe('output parser', () => {
  it('output parser - Hermes: the name first, then argument deltas without the wrapper brace, cut anywhere', () => {
    const text =
      '<think>Let me see.</think>Sure.<tool_call>\n' +
      '{"name": "get_weather", "arguments": {"city": "a}b\\"", "n": [1, {"x": 2}]}}\n</tool_call>';
    const out = streamed(FORMATS.hermes, text, { tools: TOOLS });
    assert.deepEqual(out, {
      content: 'Sure.',
      reasoning: 'Let me see.',
      toolCalls: [{ name: 'get_weather', id: 'call_0', arguments: '{"city": "a}b\\"", "n": [1, {"x": 2}]}' }],
    });
    const { events } = parseOutput(
      FORMATS.hermes,
      ['<tool_call>{"name": "get_', 'weather", "arguments": ', '{"city": "', 'Paris"}', '}</tool_call>'],
      { tools: TOOLS },
    );
    assert.deepEqual(
      events[0],
      { type: 'tool_call', index: 0, id: 'call_0', name: 'get_weather' },
      'announced once the name is known',
    );
    assert.ok(events.filter((event) => event.type === 'tool_args').length >= 2, 'arguments arrive in pieces');
  });

  it('output parser - Hermes: arguments before the name are read whole; a malformed or undeclared call is given back as text', () => {
    assert.deepEqual(
      parseOutput(FORMATS.hermes, ['<tool_call>{"arguments": {"a": 1}, "name": "get_time"}</tool_call>'], {
        tools: TOOLS,
      }).events,
      [
        { type: 'tool_call', index: 0, id: 'call_0', name: 'get_time' },
        { type: 'tool_args', index: 0, delta: '{"a":1}' },
      ],
    );
    const malformed = '<tool_call>not json at all</tool_call>';
    assert.deepEqual(parseOutput(FORMATS.hermes, [malformed], { tools: TOOLS }).output, {
      content: malformed,
      reasoning: '',
      toolCalls: [],
    });
    const undeclared = '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>';
    assert.deepEqual(streamed(FORMATS.hermes, undeclared, { tools: TOOLS }), {
      content: undeclared,
      reasoning: '',
      toolCalls: [],
    });
    // A request with no tools reads the markers as text.
    assert.deepEqual(
      parseOutput(FORMATS.hermes, ['<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>'], {
        tools: new Map(),
      }).output.toolCalls,
      [],
    );
  });

  it('output parser - tagged arguments become JSON by the declared types, streamed', () => {
    const coder =
      '<tool_call>\n<function=get_weather>\n<parameter=city>\n5123\n' +
      '</parameter>\n<parameter=days>\n5\n</parameter>\n</function>\n</tool_call>';
    assert.deepEqual(streamed(FORMATS['qwen3-coder'], coder, { tools: TOOLS }).toolCalls, [
      { name: 'get_weather', id: 'call_0', arguments: '{"city":"5123","days":5}' },
    ]);
    const glm =
      '<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call><tool_call>get_time</tool_call>';
    assert.deepEqual(streamed(FORMATS['glm-4.5'], glm, { tools: TOOLS }).toolCalls, [
      { name: 'get_weather', id: 'call_0', arguments: '{"city":"Paris"}' },
      { name: 'get_time', id: 'call_1', arguments: '{}' },
    ]);
    const minimax =
      '<minimax:tool_call>\n<invoke name="get_weather">\n' +
      '<parameter name="city">Paris</parameter>\n</invoke>\n' +
      '<invoke name="get_time">\n<parameter name="tz">UTC</parameter>\n</invoke>\n</minimax:tool_call>';
    assert.deepEqual(streamed(FORMATS['minimax-m2'], minimax, { tools: TOOLS }).toolCalls, [
      { name: 'get_weather', id: 'call_0', arguments: '{"city":"Paris"}' },
      { name: 'get_time', id: 'call_1', arguments: '{"tz":"UTC"}' },
    ]);
    assert.equal(convertValue('\n5123\n', ['string'], true), '5123');
    assert.equal(convertValue('5123', undefined, false), 5123);
    assert.equal(convertValue('Paris', undefined, false), 'Paris');
    assert.equal(convertValue('True', ['boolean'], false), true);
    assert.equal(convertValue('null', ['string', 'null'], false), null);
    assert.equal(convertValue('2 dollars', ['string', 'integer'], false), '2 dollars');
  });

  it(
    'output parser - named calls keep the ids the format gives (Kimi, ' +
      'Mistral) and end where their JSON does without a closing marker',
    () => {
      const kimi =
        '<think>k</think>x<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0' +
        '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>';
      assert.deepEqual(streamed(FORMATS['kimi-k2'], kimi), {
        content: 'x',
        reasoning: 'k',
        toolCalls: [{ name: 'get_weather', id: 'functions.get_weather:0', arguments: '{"city": "Paris"}' }],
      });
      const mistral =
        '[THINK]plan[/THINK]ok[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[CALL_ID]abc123def[ARGS]{} done';
      assert.deepEqual(streamed(FORMATS.mistral, mistral), {
        content: 'ok done',
        reasoning: 'plan',
        toolCalls: [
          { name: 'get_weather', id: 'call_0', arguments: '{"city": "Paris"}' },
          { name: 'get_time', id: 'abc123def', arguments: '{}' },
        ],
      });
    },
  );

  it('output parser - Harmony: channels, recipients, a recipient before the channel, a preamble', () => {
    const call =
      '<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary ' +
      'to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}';
    assert.deepEqual(streamed(FORMATS['gpt-oss'], call), {
      content: '',
      reasoning: 'Need weather.',
      toolCalls: [{ name: 'get_weather', id: 'call_0', arguments: '{"city":"Paris"}' }],
    });
    const answer = '<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hello!';
    assert.deepEqual(streamed(FORMATS['gpt-oss'], answer), { content: 'Hello!', reasoning: 'Think.', toolCalls: [] });
    const recipientFirst = ' to=functions.get_weather<|channel|>commentary json<|message|>{"city":"Paris"}';
    assert.deepEqual(streamed(FORMATS['gpt-oss'], recipientFirst).toolCalls, [
      { name: 'get_weather', id: 'call_0', arguments: '{"city":"Paris"}' },
    ]);
    const preamble =
      '<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>commentary to=functions.get_time<|message|>{}';
    assert.deepEqual(streamed(FORMATS['gpt-oss'], preamble), {
      content: 'Checking.',
      reasoning: '',
      toolCalls: [{ name: 'get_time', id: 'call_0', arguments: '{}' }],
    });
  });

  it(
    'output parser - a template that opens the reasoning leaves the ' +
      'model inside it; a call marker inside reasoning stays reasoning',
    () => {
      assert.deepEqual(streamed(FORMATS.hermes, 'hmm <tool_call></think>Hi', { startInReasoning: true }), {
        content: 'Hi',
        reasoning: 'hmm <tool_call>',
        toolCalls: [],
      });
      assert.deepEqual(streamed(FORMATS.mistral, '[THINK]a [TOOL_CALLS]b[ARGS]{}[/THINK]c'), {
        content: 'c',
        reasoning: 'a [TOOL_CALLS]b[ARGS]{}',
        toolCalls: [],
      });
    },
  );

  it('output parser - list, pythonic and bare-JSON syntaxes', () => {
    assert.deepEqual(streamed(FORMATS.llama3, ' {"name": "get_weather", "parameters": {"city": "Paris"}}').toolCalls, [
      { name: 'get_weather', id: 'call_0', arguments: '{"city": "Paris"}' },
    ]);
    assert.deepEqual(
      streamed(FORMATS.llama3, 'Plain {"name": "x"} text', { tools: TOOLS }).content,
      'Plain {"name": "x"} text',
    );
    const lfm = '<|tool_call_start|>[get_weather(city="Paris", days=3)]<|tool_call_end|>Checking.';
    assert.deepEqual(streamed(FORMATS.lfm2, lfm), {
      content: 'Checking.',
      reasoning: '',
      toolCalls: [{ name: 'get_weather', id: 'call_0', arguments: '{"city":"Paris","days":3}' }],
    });
    const command =
      '<|START_THINKING|>plan<|END_THINKING|><|START_ACTION|>[{"tool_call_id": "0", ' +
      '"tool_name": "get_weather", "parameters": {"city": "Paris"}}]<|END_ACTION|>';
    assert.deepEqual(streamed(FORMATS['command-r7b'], command), {
      content: '',
      reasoning: 'plan',
      toolCalls: [{ name: 'get_weather', id: '0', arguments: '{"city":"Paris"}' }],
    });
    assert.deepEqual(parsePythonic("[f(a='x', b=True, c=None, d=[1, 2])]"), [
      { name: 'f', arguments: '{"a":"x","b":true,"c":null,"d":[1,2]}' },
    ]);
  });

  it('output parser - formats are recognised by their template and can be named', () => {
    assert.equal(fingerprint('{{ "<|channel|>" }}')?.id, 'gpt-oss');
    assert.equal(fingerprint('<tool_call>\n<function=x>\n<parameter=y>')?.id, 'qwen3-coder');
    assert.equal(fingerprint('<tool_call>{"name"')?.id, 'hermes');
    assert.equal(fingerprint('no tools here'), undefined);
    assert.equal(formatById('kimi-k2')?.id, 'kimi-k2');
    assert.equal(formatById('toString'), undefined);
  });
});
