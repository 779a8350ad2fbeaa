import type { ArgSyntax, ChatFormat, ToolSyntax } from './chat-format.js';

const THINK = { open: '<think>', close: '</think>' } as const;

/** `{"name": …, "arguments": …}`-style JSON inside markers. */
const jsonCall = (
  open: string,
  close: string | undefined,
  extra: Partial<Extract<ToolSyntax['body'], { kind: 'json' }>> = {},
): ToolSyntax => ({
  callOpen: open,
  ...(close !== undefined && { callClose: close }),
  body: { kind: 'json', nameKeys: ['name'], argKeys: ['arguments', 'parameters'], ...extra },
});

/** Qwen3-Coder's and Seed-OSS's `<parameter=KEY>\nVALUE\n</parameter>`. */
const XML_PARAMETERS: ArgSyntax = {
  kind: 'tagged',
  keyOpen: '<parameter=',
  keyClose: '>',
  valueClose: '</parameter>',
  trimNewline: true,
};

/**
 * The formats cortex knows, each as the family's real models write it (llama.cpp's `common/chat*` and
 * its `tests/test-chat.cpp` are the reference). Chosen for a model by its chat template (fingerprint).
 */
export const FORMATS = {
  /** Qwen2.5, Qwen3, Hermes 2 Pro, and every template that teaches `<tool_call>{json}</tool_call>`. */
  hermes: { id: 'hermes', reasoning: THINK, tools: jsonCall('<tool_call>', '</tool_call>') },
  /** Qwen3-Coder, Qwen3.5: `<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>`. */
  'qwen3-coder': {
    id: 'qwen3-coder',
    reasoning: THINK,
    tools: {
      callOpen: '<tool_call>',
      callClose: '</tool_call>',
      bareOpen: '<function=',
      endsReasoning: true,
      body: { kind: 'named', namePrefix: '<function=', nameEnd: ['>'], args: XML_PARAMETERS, argsClose: '</function>' },
    },
  },
  'seed-oss': {
    id: 'seed-oss',
    reasoning: { open: '<seed:think>', close: '</seed:think>' },
    tools: {
      callOpen: '<seed:tool_call>',
      callClose: '</seed:tool_call>',
      body: {
        kind: 'named',
        namePrefix: '<function=',
        nameEnd: ['>'],
        args: { ...XML_PARAMETERS, trimNewline: false },
        argsClose: '</function>',
      },
    },
  },
  /** GLM-4.5 / 4.6 / 4.7: `<tool_call>NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n</tool_call>`. */
  'glm-4.5': {
    id: 'glm-4.5',
    reasoning: THINK,
    tools: {
      callOpen: '<tool_call>',
      callClose: '</tool_call>',
      body: {
        kind: 'named',
        nameEnd: ['\n', '<arg_key>'],
        args: {
          kind: 'tagged',
          keyOpen: '<arg_key>',
          keyClose: '</arg_key>',
          valueOpen: '<arg_value>',
          valueClose: '</arg_value>',
        },
      },
    },
  },
  /** MiniMax-M2: `<minimax:tool_call>\n<invoke name="NAME">\n<parameter name="KEY">VALUE</parameter>\n</invoke>\n</minimax:tool_call>`. */
  'minimax-m2': {
    id: 'minimax-m2',
    reasoning: THINK,
    tools: {
      sectionOpen: '<minimax:tool_call>',
      sectionClose: '</minimax:tool_call>',
      callOpen: '<invoke name="',
      callClose: '</invoke>',
      body: {
        kind: 'named',
        nameEnd: ['">'],
        args: {
          kind: 'tagged',
          keyOpen: '<parameter name="',
          keyClose: '">',
          valueClose: '</parameter>',
          trimNewline: true,
        },
      },
    },
  },
  /** Devstral, Magistral, Ministral 3: `[TOOL_CALLS]NAME[ARGS]{json}`, once per call, no closing marker. */
  mistral: {
    id: 'mistral',
    reasoning: { open: '[THINK]', close: '[/THINK]' },
    forcedCall: '[TOOL_CALLS]{name}[ARGS]',
    tools: {
      callOpen: '[TOOL_CALLS]',
      body: { kind: 'named', nameEnd: ['[ARGS]'], idMarker: '[CALL_ID]', args: { kind: 'json' } },
    },
  },
  /** Mistral Nemo and older: `[TOOL_CALLS][{"name", "arguments", "id"}, …]`. */
  'mistral-nemo': { id: 'mistral-nemo', tools: jsonCall('[TOOL_CALLS]', undefined, { list: true, idKey: 'id' }) },
  /** Llama 3.1 – 3.3: the whole answer is `{"name": …, "parameters": {…}}`. */
  llama3: { id: 'llama3', tools: { ...jsonCall('', undefined), atStart: true } },
  /** DeepSeek R1: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{…}\n```<｜tool▁call▁end｜>…`. */
  'deepseek-r1': {
    id: 'deepseek-r1',
    reasoning: THINK,
    tools: {
      sectionOpen: '<｜tool▁calls▁begin｜>',
      sectionClose: '<｜tool▁calls▁end｜>',
      callOpen: '<｜tool▁call▁begin｜>',
      callClose: '<｜tool▁call▁end｜>',
      body: {
        kind: 'named',
        namePrefix: 'function<｜tool▁sep｜>',
        nameEnd: ['\n'],
        args: { kind: 'json', fence: true },
      },
    },
  },
  /** DeepSeek V3.1: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜><｜tool▁calls▁end｜>`. */
  'deepseek-v3.1': {
    id: 'deepseek-v3.1',
    reasoning: THINK,
    forcedCall: '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{name}<｜tool▁sep｜>',
    tools: {
      sectionOpen: '<｜tool▁calls▁begin｜>',
      sectionClose: '<｜tool▁calls▁end｜>',
      callOpen: '<｜tool▁call▁begin｜>',
      callClose: '<｜tool▁call▁end｜>',
      body: { kind: 'named', nameEnd: ['<｜tool▁sep｜>'], args: { kind: 'json' } },
    },
  },
  /** Kimi K2: calls in a section, each `functions.NAME:IDX<|tool_call_argument_begin|>{…}`; `functions.NAME:IDX` is the call's id. */
  'kimi-k2': {
    id: 'kimi-k2',
    reasoning: THINK,
    forcedCall: '<|tool_calls_section_begin|><|tool_call_begin|>functions.{name}:{index}<|tool_call_argument_begin|>',
    tools: {
      sectionOpen: '<|tool_calls_section_begin|>',
      sectionClose: '<|tool_calls_section_end|>',
      callOpen: '<|tool_call_begin|>',
      callClose: '<|tool_call_end|>',
      endsReasoning: true,
      body: {
        kind: 'named',
        nameEnd: ['<|tool_call_argument_begin|>'],
        nameId: /^(?:functions\.)?(.+?)(?::\d+)?$/,
        args: { kind: 'json' },
      },
    },
  },
  /** gpt-oss: Harmony channels. */
  'gpt-oss': {
    id: 'gpt-oss',
    forcedCall: '<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>',
    harmony: {
      start: '<|start|>',
      channel: '<|channel|>',
      message: '<|message|>',
      constrain: '<|constrain|>',
      ends: ['<|end|>', '<|call|>', '<|return|>'],
      reasoningChannels: ['analysis'],
      functionPrefix: 'functions.',
    },
  },
  /** IBM Granite 3.x: `<|tool_call|>[{"name", "arguments"}, …]`. */
  granite: { id: 'granite', reasoning: THINK, tools: jsonCall('<|tool_call|>', undefined, { list: true }) },
  /** NVIDIA Nemotron Nano v2: `<TOOLCALL>[{"name", "arguments"}, …]</TOOLCALL>`. */
  'nemotron-v2': { id: 'nemotron-v2', reasoning: THINK, tools: jsonCall('<TOOLCALL>', '</TOOLCALL>', { list: true }) },
  /** Command R7B: `<|START_ACTION|>[{"tool_call_id", "tool_name", "parameters"}, …]<|END_ACTION|>`. */
  'command-r7b': {
    id: 'command-r7b',
    reasoning: { open: '<|START_THINKING|>', close: '<|END_THINKING|>' },
    strip: ['<|START_RESPONSE|>', '<|END_RESPONSE|>'],
    tools: {
      callOpen: '<|START_ACTION|>',
      callClose: '<|END_ACTION|>',
      body: { kind: 'json', nameKeys: ['tool_name'], argKeys: ['parameters'], idKey: 'tool_call_id', list: true },
    },
  },
  /** Apertus: `<|tools_prefix|>[{"NAME": {…}}, …]<|tools_suffix|>`. */
  apertus: {
    id: 'apertus',
    reasoning: { open: '<|inner_prefix|>', close: '<|inner_suffix|>' },
    tools: {
      callOpen: '<|tools_prefix|>',
      callClose: '<|tools_suffix|>',
      body: { kind: 'json', nameKeys: [], argKeys: [], list: true, nameAsKey: true },
    },
  },
  /** LFM2: `<|tool_call_start|>[name(key="value")]<|tool_call_end|>`. */
  lfm2: {
    id: 'lfm2',
    reasoning: THINK,
    tools: { callOpen: '<|tool_call_start|>', callClose: '<|tool_call_end|>', body: { kind: 'pythonic' } },
  },
  /** Gemma 4: `<|channel>thought…<channel|>` reasoning, `<|tool_call>call:NAME{key:<|"|>text<|"|>}<tool_call|>` calls. */
  gemma4: {
    id: 'gemma4',
    reasoning: { open: '<|channel>thought', close: '<channel|>' },
    strip: ['<channel|>', '<|channel>'],
    tools: {
      callOpen: '<|tool_call>',
      callClose: '<tool_call|>',
      body: { kind: 'named', namePrefix: 'call:', nameEnd: ['{'], args: { kind: 'dict', quote: '<|"|>' } },
    },
  },
  /** A template with no known call syntax: reasoning in `<think>` only. */
  plain: { id: 'plain', reasoning: THINK },
} as const satisfies Record<string, ChatFormat>;

export type FormatId = keyof typeof FORMATS;

/**
 * What in a chat template says which format its model writes, in order: the first rule whose every
 * string is in the template wins (the more specific families first, as llama.cpp checks them).
 */
export const FINGERPRINTS: ReadonlyArray<{ readonly format: FormatId; readonly all: readonly string[] }> = [
  { format: 'gpt-oss', all: ['<|channel|>'] },
  { format: 'kimi-k2', all: ['<|tool_calls_section_begin|>'] },
  // Kimi K2's first template declares tools but writes no calls of its own.
  { format: 'kimi-k2', all: ['tool_declare', '<|im_middle|>'] },
  { format: 'deepseek-r1', all: ['<｜tool▁calls▁begin｜>', '```json'] },
  { format: 'deepseek-v3.1', all: ['<｜tool▁calls▁begin｜>'] },
  { format: 'minimax-m2', all: ['<minimax:tool_call>'] },
  { format: 'glm-4.5', all: ['<arg_key>'] },
  { format: 'seed-oss', all: ['<seed:tool_call>'] },
  { format: 'qwen3-coder', all: ['<function=', '<parameter='] },
  { format: 'command-r7b', all: ['<|START_ACTION|>'] },
  { format: 'apertus', all: ['<|tools_prefix|>'] },
  { format: 'lfm2', all: ['<|tool_call_start|>'] },
  { format: 'nemotron-v2', all: ['<TOOLCALL>'] },
  { format: 'granite', all: ['<|tool_call|>'] },
  { format: 'gemma4', all: ['<|tool_call>'] },
  { format: 'hermes', all: ['<tool_call>'] },
  { format: 'mistral', all: ['[TOOL_CALLS]', '[ARGS]'] },
  { format: 'mistral-nemo', all: ['[TOOL_CALLS]'] },
  { format: 'llama3', all: ['<|start_header_id|>', 'parameters'] },
];

/** The format a chat template teaches, by its fingerprint; undefined when none matches. */
export function fingerprint(template: string): ChatFormat | undefined {
  const rule = FINGERPRINTS.find((candidate) => candidate.all.every((text) => template.includes(text)));
  return rule && FORMATS[rule.format];
}

/** A format by name (the catalogue's `format:` override), or undefined. */
export function formatById(id: string): ChatFormat | undefined {
  return Object.hasOwn(FORMATS, id) ? FORMATS[id as FormatId] : undefined;
}
