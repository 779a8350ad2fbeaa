import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { getLlama, LlamaLogLevel } from 'node-llama-cpp';
import type { ToolDefinition } from '@cortex/contracts';
import type { ChatFormat } from './formats/chat-format.js';
import { FORMATS } from './formats/families.js';
import { jsonArgumentRules } from './json-grammar.js';
import { callKeys } from './call-hold.js';
import { GrammarCache } from './grammars.js';
import { hasWholeCallGrammar, wholeCallGrammar, wholeCallMarkers, wholeCallOpenings } from './whole-call-grammar.js';

const everyType: ToolDefinition = {
  name: 'every_type',
  description: 'a parameter of each type',
  parameters: {
    type: 'object',
    properties: {
      text: { type: 'string', description: 'a "quoted" \\ value' },
      count: { type: 'integer' },
      ratio: { type: 'number' },
      on: { type: 'boolean' },
      unit: { enum: ['C', 'F'] },
      where: { type: 'object', properties: { lat: { type: 'number' } } },
      tags: { type: 'array', items: { type: 'string' } },
      anything: {},
    },
    required: ['count'],
  },
};
const none: ToolDefinition = { name: 'no_parameters', description: 'nothing to say', parameters: { type: 'object' } };

describe('whole call grammars', () => {
  const whole = (Object.values(FORMATS) as ChatFormat[]).filter((format) => hasWholeCallGrammar(format.tools));

  it('whole call grammars - every format with one, every parameter type, compiles in llama.cpp', async () => {
    assert.deepEqual(whole.map((format) => format.id).sort(), [
      'deepseek-r1',
      'deepseek-v3.1',
      'gemma4',
      'glm-4.5',
      'kimi-k2',
      'lfm2',
      'minimax-m2',
      'qwen3-coder',
      'seed-oss',
    ]);
    const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
    const tools = [everyType, none];
    for (const format of whole) {
      const syntax = format.tools ?? assert.fail(format.id);
      const json =
        syntax.body.kind === 'named' && syntax.body.args.kind === 'json'
          ? await jsonArgumentRules(
              llama,
              tools.map((tool) => tool.parameters),
            )
          : undefined;
      const grammar = wholeCallGrammar(syntax, tools, { json });
      await llama
        .createGrammar({ grammar })
        .catch((error: Error) => assert.fail(`${format.id}: ${error.message}\n${grammar}`));
    }
  });

  it('whole call grammars - a JSON call under its own keys compiles: a list of them, the name as a key', async () => {
    const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
    const grammars = new GrammarCache(llama);
    for (const id of ['command-r7b', 'apertus', 'hermes', 'nemotron-v2'] as const) {
      const syntax = FORMATS[id].tools;
      const keys = callKeys(syntax) ?? assert.fail(id);
      const grammar = await grammars.forToolCall(
        [everyType, none],
        syntax.body.kind === 'json' && syntax.body.list,
        keys,
      );
      // The call's keys, each tool's name, and the strict arguments (not the any-object fallback).
      for (const text of [...(keys.nameAsKey ? [] : [keys.name, keys.args]), 'every_type', 'no_parameters', 'count'])
        assert.ok(grammar.grammar.includes(`\\"${text}\\"`), `${id}: ${text} in ${grammar.grammar.slice(0, 400)}`);
    }
    assert.deepEqual(callKeys(FORMATS['command-r7b'].tools), { name: 'tool_name', args: 'parameters' });
    assert.deepEqual(callKeys(FORMATS.apertus.tools), { name: '', args: '', nameAsKey: true });
  });

  it("whole call grammars - a tag's string value is any text but the value's closing tag", () => {
    const grammar = wholeCallGrammar(FORMATS['qwen3-coder'].tools ?? assert.fail(), [everyType]);
    // The steps through `</parameter>`: each may break off, or start again at a `<`; none completes it.
    assert.match(grammar, /^until-1 ::= \[\^\/<\] \| "<"\+ until-1 \| "\/" until-2$/m);
    assert.match(grammar, /^until-11 ::= \[\^><\] \| "<"\+ until-1$/m);
    assert.match(grammar, /^text ::= \(\[\^<\] \| "<"\+ until-1\)\*$/m);
    // Qwen3-Coder's value on lines of its own; the integer a number, the required one always written.
    assert.match(grammar, /"<parameter=" "count" ">" "\\n"\? integer "\\n"\? "<\/parameter>"/);
    assert.match(grammar, /^call-0 ::= "<function=" "every_type" \(">"\) \(ws param-0-0\)\? ws param-0-1 /m);
  });

  it('whole call grammars - a list of parameters: each at most once, in order, the required one always, separated', () => {
    const grammar = wholeCallGrammar(FORMATS.lfm2.tools ?? assert.fail(), [everyType]);
    // Eight parameters, `count` (the second) required: before it one may be written, after it each may.
    assert.match(grammar, /^call-0 ::= "every_type" "\(" args-0-first-0 "\)"$/m);
    assert.match(grammar, /^root ::= ws "\[" py-call \("," " "\? py-call\)\* "\]" ws "<\|tool_call_end\|>" ws$/m);
    const one = wholeCallGrammar(FORMATS.lfm2.tools ?? assert.fail(), [everyType], { oneCall: true });
    assert.match(one, /^root ::= ws "\[" py-call "\]" ws "<\|tool_call_end\|>" ws$/m);
    assert.match(grammar, /^args-0-first-0 ::= args-0-member-0 args-0-rest-1 \| args-0-first-1$/m);
    assert.match(grammar, /^args-0-first-1 ::= args-0-member-1 args-0-rest-2$/m);
    assert.match(grammar, /^args-0-rest-1 ::= "," " "\? args-0-member-1 args-0-rest-2$/m);
    assert.match(grammar, /^args-0-rest-7 ::= \("," " "\? args-0-member-7\)\?$/m);
    // Python's literals: a boolean is True or False, a string in double quotes, an integer digits.
    assert.match(grammar, /^args-0-member-3 ::= "on" "=" \("True" \| "False"\)$/m);
    assert.match(grammar, /^args-0-member-0 ::= "text" "=" py-string$/m);
    assert.match(grammar, /^args-0-member-1 ::= "count" "=" integer$/m);
  });

  it("whole call grammars - Gemma 4's dict: bare keys, strings between its quote, and DeepSeek R1's JSON in its fence", async () => {
    const gemma = wholeCallGrammar(FORMATS.gemma4.tools ?? assert.fail(), [everyType]);
    // The name's end is the dict's own opening brace.
    assert.match(gemma, /^call-0 ::= "call:" "every_type" "\{" args-0-first-0 "\}" ws "<tool_call\|>"$/m);
    assert.match(gemma, /^dict-string ::= "<\|\\"\|>" dict-text "<\|\\"\|>"$/m);
    assert.match(gemma, /^args-0-member-4 ::= "unit" ":" "<\|\\"\|>" \("C" \| "F"\) "<\|\\"\|>"$/m);
    const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
    const json = await jsonArgumentRules(llama, [everyType.parameters]);
    const r1 = wholeCallGrammar(FORMATS['deepseek-r1'].tools ?? assert.fail(), [everyType], { json });
    assert.match(
      r1,
      /^call-0 ::= "function<｜tool▁sep｜>" "every_type" \("\\n"\) "```json\\n" j0-root "\\n```" ws "<｜tool▁call▁end｜>"$/m,
    );
    // The schema's rules, renamed beside the call's (its optional members written by schemaGrammar); no
    // run of newlines to stop on is left in them.
    const root = /^j0-root ::= (j0-cgo\d+)$/m.exec(r1)?.[1] ?? assert.fail(r1);
    assert.match(r1, new RegExp(`^${root} ::= "\\{" j0-cgo-ws `, 'm'));
    assert.doesNotMatch(r1, /\\n\\n\\n\\n/);
  });

  it('whole call grammars - the markers a call writes itself, which its grammar writes and no bias may ban', () => {
    assert.deepEqual(wholeCallMarkers(FORMATS['glm-4.5'].tools), [
      '<tool_call>',
      '\n',
      '<arg_key>',
      '<arg_key>',
      '</arg_key>',
      '<arg_value>',
      '</arg_value>',
      '</tool_call>',
    ]);
    assert.deepEqual(wholeCallMarkers(FORMATS.gemma4.tools), ['<|tool_call>', 'call:', '{', '<|"|>', '<tool_call|>']);
    // Held from the section's opening or where the reasoning ends, the grammar writes the openings itself.
    const minimax = FORMATS['minimax-m2'].tools ?? assert.fail();
    assert.deepEqual(wholeCallOpenings(minimax, 'section'), ['<invoke name="']);
    assert.deepEqual(wholeCallOpenings(minimax, 'answer'), ['<minimax:tool_call>', '<invoke name="']);
    // GLM's name, without a prefix, is read from the call's first character: no white space before it.
    assert.match(wholeCallGrammar(FORMATS['glm-4.5'].tools ?? assert.fail(), [none]), /^root ::= \(call-0\) ws$/m);
    assert.match(
      wholeCallGrammar(minimax, [none], { from: 'answer' }),
      /^root ::= ws "<minimax:tool_call>" ws "<invoke name=\\"" \(call-0\) ws$/m,
    );
    assert.deepEqual(wholeCallMarkers(FORMATS.hermes.tools), [], 'a JSON call is held as JSON');
  });
});
