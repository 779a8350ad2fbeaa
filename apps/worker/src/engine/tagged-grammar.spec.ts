import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { getLlama, LlamaLogLevel } from 'node-llama-cpp';
import type { ToolDefinition } from '@cortex/contracts';
import type { ChatFormat } from './formats/chat-format.js';
import { FORMATS } from './formats/families.js';
import { isTaggedSyntax, taggedCallGrammar, taggedMarkers } from './tagged-grammar.js';

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

describe('tagged call grammars', () => {
  const tagged = (Object.values(FORMATS) as ChatFormat[]).filter((format) => isTaggedSyntax(format.tools));

  it('tagged call grammars - every tagged format, every parameter type, compiles in llama.cpp', async () => {
    assert.deepEqual(tagged.map((format) => format.id).sort(), ['glm-4.5', 'minimax-m2', 'qwen3-coder', 'seed-oss']);
    const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
    for (const format of tagged) {
      const grammar = taggedCallGrammar(format.tools ?? assert.fail(format.id), [everyType, none]);
      await llama
        .createGrammar({ grammar })
        .catch((error: Error) => assert.fail(`${format.id}: ${error.message}\n${grammar}`));
    }
  });

  it("tagged call grammars - a string value is any text but the value's closing tag", () => {
    const grammar = taggedCallGrammar(FORMATS['qwen3-coder'].tools ?? assert.fail(), [everyType]);
    // The steps through `</parameter>`: each may break off, or start again at a `<`; none completes it.
    assert.match(grammar, /^until-1 ::= \[\^\/<\] \| "<"\+ until-1 \| "\/" until-2$/m);
    assert.match(grammar, /^until-11 ::= \[\^><\] \| "<"\+ until-1$/m);
    assert.match(grammar, /^text ::= \(\[\^<\] \| "<"\+ until-1\)\*$/m);
    // Qwen3-Coder's value on lines of its own; the integer a number, the required one always written.
    assert.match(grammar, /"<parameter=" "count" ">" "\\n"\? integer "\\n"\? "<\/parameter>"/);
    assert.match(grammar, /^call-0 ::= "<function=" "every_type" \(">"\) \(ws param-0-0\)\? ws param-0-1 /m);
  });

  it('tagged call grammars - the markers a call writes itself, which its grammar writes and no bias may ban', () => {
    assert.deepEqual(taggedMarkers(FORMATS['glm-4.5'].tools), [
      '\n',
      '<arg_key>',
      '<arg_key>',
      '</arg_key>',
      '<arg_value>',
      '</arg_value>',
      '</tool_call>',
    ]);
    assert.deepEqual(taggedMarkers(FORMATS.hermes.tools), [], 'not a tagged format');
  });
});
