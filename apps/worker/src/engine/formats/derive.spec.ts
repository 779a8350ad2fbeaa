import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Template } from '@huggingface/jinja';
import { familyTemplate } from '@cortex/fixtures';
import type { ChatFormat } from './chat-format.js';
import { deriveFormat } from './derive.js';
import { fingerprint } from './families.js';
import { parseOutput } from './parse-output.js';
import { pythonMethods, templateMessages } from './template-prompt.js';

/** A vendor's template as the worker renders it (arguments as objects, or as text where the template takes text). */
function render(file: string): Parameters<typeof deriveFormat>[0] {
  const template = new Template(pythonMethods(familyTemplate(file)));
  return (messages, tools) => {
    const run = (objects: boolean): string =>
      template.render({
        messages: templateMessages(messages, objects, false),
        ...(tools && {
          tools: tools.map((tool) => ({
            type: 'function',
            function: { name: tool.name, description: tool.description, parameters: tool.parameters },
          })),
        }),
        add_generation_prompt: false,
        bos_token: '',
        eos_token: '',
      });
    const objects = run(true);
    return objects.includes('probe_value') || !messages.some((m) => m.toolCalls?.length) ? objects : run(false);
  };
}

/** The format derived from a template no fingerprint knows (it fails when one does, or nothing is derived). */
function deriveUnknown(source: string): ChatFormat {
  assert.equal(fingerprint(source), undefined, 'no fingerprint knows it');
  const template = new Template(source);
  return (
    deriveFormat((messages) => template.render({ messages: templateMessages(messages, true, false) })) ??
    assert.fail('nothing derived')
  );
}

const TOOLS = new Map([['get_weather', { type: 'object', properties: { city: { type: 'string' } } }]]);

/**
 * The format of a template no fingerprint knows, found from the template itself. Checked on vendors'
 * templates whose formats cortex knows: what is derived must read their models' real output as the
 * known format does.
 */
describe('derived formats', () => {
  const cases: ReadonlyArray<[file: string, output: string, reasoning: boolean]> = [
    [
      'Qwen-Qwen3-0.6B.jinja',
      '<think>\nLet me see.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
      true,
    ],
    ['unsloth-mistral-Devstral-Small-2507.jinja', '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', false],
    [
      'deepseek-ai-DeepSeek-V3.1.jinja',
      '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
      false,
    ],
    // Tagged arguments, one pair per argument.
    [
      'Qwen3-Coder.jinja',
      '<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>',
      false,
    ],
    [
      'GLM-4.6.jinja',
      '<think>Let me see.</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>',
      true,
    ],
    ['glm_4_5.jinja', '<tool_call>get_weather<arg_key>city</arg_key>\n<arg_value>Paris</arg_value></tool_call>', false],
    [
      'unsloth-MiniMax-M2.jinja',
      '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n</invoke>\n</minimax:tool_call>',
      false,
    ],
    [
      'llama-cpp-lfm2.jinja',
      '<|tool_call_start|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|tool_call_end|>',
      false,
    ],
  ];
  for (const [file, output, reasoning] of cases) {
    it(`derived formats - ${file}: the calls (and reasoning) its model writes are read from what the template alone says`, () => {
      const format = deriveFormat(render(file)) ?? assert.fail(`nothing derived from ${file}`);
      const { output: parsed } = parseOutput(format, [...output], { tools: TOOLS });
      assert.deepEqual(
        parsed.toolCalls.map((call) => [call.name, JSON.parse(call.arguments) as unknown]),
        [['get_weather', { city: 'Paris' }]],
        `${file}: ${JSON.stringify(format)} read ${JSON.stringify(parsed)}`,
      );
      assert.equal(parsed.content.trim(), '');
      if (reasoning) assert.equal(parsed.reasoning, 'Let me see.');
    });
  }

  it('derived formats - a family no fingerprint knows: its own keys and markers, read as its model writes them', () => {
    // An invented family: `<call>{"function": …, "args": …}</call>`, reasoning in `<reflect>`.
    const source = [
      '{%- for m in messages %}{{ "<|turn|>" + m.role + "\\n" }}',
      '{%- if m.reasoning_content %}{{ "<reflect>" + m.reasoning_content + "</reflect>" }}{% endif %}',
      '{{- m.content }}',
      '{%- for c in m.tool_calls or [] %}{{ "<call>" + ({"function": c.function.name, ' +
        '"args": c.function.arguments} | tojson) + "</call>" }}{% endfor %}',
      '{{- "<|end|>\\n" }}{% endfor %}',
    ].join('');
    const format = deriveUnknown(source);
    assert.deepEqual(format.reasoning, { open: '<reflect>', close: '</reflect>' });
    const { output } = parseOutput(
      format,
      [...'<reflect>Think.</reflect>Sure.<call>{"function": "get_weather", "args": {"city": "Paris"}}</call>'],
      { tools: TOOLS },
    );
    assert.deepEqual(output, {
      content: 'Sure.',
      reasoning: 'Think.',
      toolCalls: [{ name: 'get_weather', id: 'call_0', arguments: '{"city": "Paris"}' }],
    });
  });

  it('derived formats - an invented family of tagged arguments: read as its model writes them, values typed by the schema', () => {
    // `<act><fn:NAME><arg:KEY>VALUE</arg></fn></act>`, arguments written one tag pair each.
    const source = [
      '{%- for m in messages %}{{ "<|turn|>" + m.role + "\\n" + m.content }}',
      '{%- for c in m.tool_calls or [] %}{{ "<act><fn:" + c.function.name + ">" }}',
      '{%- for k, v in c.function.arguments | items %}{{ "<arg:" + k + ">" + v + "</arg>" }}{% endfor %}',
      '{{- "</fn></act>" }}{% endfor %}',
      '{{- "<|end|>\\n" }}{% endfor %}',
    ].join('');
    const format = deriveUnknown(source);
    assert.equal(format.tools?.body.kind, 'named');
    const tools = new Map([
      ['forecast', { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } } }],
    ]);
    const { output } = parseOutput(
      format,
      [...'Sure.<act><fn:forecast><arg:city>Paris</arg><arg:days>3</arg></fn></act>'],
      {
        tools,
      },
    );
    assert.equal(output.content, 'Sure.');
    assert.deepEqual(
      output.toolCalls.map((call) => [call.name, JSON.parse(call.arguments) as unknown]),
      [['forecast', { city: 'Paris', days: 3 }]],
    );
  });

  it('derived formats - a template that teaches neither reasoning nor calls gives nothing (plain)', () => {
    const chatml =
      "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}";
    const template = new Template(chatml);
    assert.equal(
      deriveFormat((messages) => template.render({ messages: templateMessages(messages, true, false) })),
      null,
    );
  });
});
