import type { ToolDefinition } from '@cortex/contracts';
import type { ArgSyntax, ToolSyntax } from './formats/chat-format.js';
import { cls, lit, members, Rules } from './gbnf-rules.js';

type Named = Extract<ToolSyntax['body'], { kind: 'named' }>;

/**
 * The syntaxes a whole call's grammar is written for: a call that closes with a marker of its own
 * and writes its name as text, then its arguments as tags (Qwen3-Coder, GLM, Seed-OSS, MiniMax), as
 * JSON (fenced or not: DeepSeek R1) or as Gemma 4's dict; or a pythonic list of calls (LFM2).
 */
export function hasWholeCallGrammar(syntax: ToolSyntax | undefined): syntax is ToolSyntax {
  if (syntax?.callClose === undefined) return false;
  return syntax.body.kind === 'named' || syntax.body.kind === 'pythonic';
}

/** The markers a call writes inside itself, through its closing one: its grammar writes them, so no bias may ban them. */
export function wholeCallMarkers(syntax: ToolSyntax | undefined): string[] {
  if (!hasWholeCallGrammar(syntax)) return [];
  const { body } = syntax;
  const own =
    body.kind !== 'named'
      ? []
      : [
          body.namePrefix,
          ...body.nameEnd,
          ...(body.args.kind === 'tagged'
            ? [body.args.keyOpen, body.args.keyClose, body.args.valueOpen, body.args.valueClose]
            : body.args.kind === 'dict'
              ? [body.args.quote]
              : []),
          body.argsClose,
        ];
  // A grammar held from before the call (WholeCallStart) writes the section's and the call's opening markers too.
  return [syntax.sectionOpen, syntax.callOpen, ...own, syntax.callClose].filter((marker): marker is string =>
    Boolean(marker),
  );
}

/**
 * Where a whole call's grammar starts holding: after the call's opening marker (a call the model
 * opened, or a forced one whose opening cortex wrote), after its section's opening marker (a forced
 * call in a section: the model writes the call's own opening under the grammar), or where the
 * model's reasoning ends (a forced call of a model that starts inside its reasoning, which it may
 * finish first: the grammar writes the section's and the call's openings).
 */
export type WholeCallStart = 'call' | 'section' | 'answer';

/** The markers the grammar writes before the call's name, by where it starts. */
export function wholeCallOpenings(syntax: ToolSyntax, from: WholeCallStart): string[] {
  if (from === 'call') return [];
  return [...(from === 'answer' && syntax.sectionOpen ? [syntax.sectionOpen] : []), syntax.callOpen];
}

/** A tool's JSON arguments as rules node-llama-cpp's schema generator wrote (GrammarCache), by tool. */
export interface JsonArgumentRules {
  /** The rule of each tool's arguments, in the order of the tools. */
  readonly roots: readonly string[];
  /** Their rules' text, named so that they do not meet this grammar's own. */
  readonly rules: string;
}

/** What a whole call's grammar is written with besides the syntax and the tools. */
export interface WholeCallOptions {
  /** The tools' argument rules for a JSON syntax (any JSON object without them). */
  readonly json?: JsonArgumentRules;
  /** Where it starts holding; after the call's opening marker by default. */
  readonly from?: WholeCallStart;
  /** A pythonic list holds one call only (a forced call, `parallel_tool_calls: false`); else one or more. */
  readonly oneCall?: boolean;
}

/**
 * The GBNF of one call of `tools` from where it starts holding through its closing marker, read from
 * the same description the parser reads: the name one of the tools', then its arguments as the
 * syntax writes them — tag pairs (`<parameter=KEY>`, GLM's `<arg_key>`/`<arg_value>`), JSON of the
 * tool's schema (in DeepSeek R1's code fence), Gemma 4's dict, or LFM2's `[name(key="value"), …]` —
 * each declared parameter at most once in its declared order (the required ones always), each value
 * written as its schema's type: a number for an integer, a boolean as the syntax writes one, a string
 * as text that does not close it. So a forced call, or any call of a `strict` tool, is one of the
 * tools with arguments of its schema by construction, as llama.cpp's server builds its grammar from
 * the parser's description.
 */
export function wholeCallGrammar(
  syntax: ToolSyntax,
  tools: readonly ToolDefinition[],
  options: WholeCallOptions = {},
): string {
  if (!hasWholeCallGrammar(syntax)) throw new Error('not a syntax a whole call grammar is written for');
  const rules = new Rules();
  const { body } = syntax;
  const close = lit(syntax.callClose ?? '');
  const calls = tools.map((tool, i) => {
    const schema = (tool.parameters ?? {}) as ObjectSchema;
    if (body.kind === 'pythonic') {
      const values = new Values(rules, pythonValues(rules));
      const params = members(rules, `args-${i}`, schema, (key, property) => `${lit(key)} "=" ${values.of(property)}`);
      return rules.add(`call-${i}`, `${lit(tool.name)} "(" ${params} ")"`);
    }
    if (body.kind !== 'named') throw new Error('unreachable');
    const args = argumentsOf(body.args, rules, i, schema, options.json?.roots[i]);
    const after = body.argsClose ? ` ws ${lit(body.argsClose)}` : '';
    const name = [...(body.namePrefix ? [lit(body.namePrefix)] : []), lit(tool.name), nameEnd(body)].filter(Boolean);
    return rules.add(`call-${i}`, `${name.join(' ')} ${args}${after} ws ${close}`);
  });
  const one = `(${calls.join(' | ')})`;
  // A pythonic list closes once, after its last call.
  const held =
    body.kind === 'pythonic'
      ? `"[" ${rules.add('py-call', one)}${options.oneCall ? '' : ' ("," " "? py-call)*'} "]" ws ${close}`
      : one;
  // White space before the call's own text only where the parser skips it: a name without a prefix is
  // read from the first character on (GLM's ends at a newline, so one there would end it empty).
  const lead = body.kind === 'named' && !body.namePrefix ? '' : 'ws ';
  const openings = wholeCallOpenings(syntax, options.from ?? 'call').map((marker) => `ws ${lit(marker)} `);
  rules.add('root', `${openings.join('')}${lead}${held} ws`);
  rules.add('ws', '[ \\t\\n]{0,3}');
  return [rules.text(), options.json?.rules].filter(Boolean).join('\n');
}

/**
 * What ends the name: one of the syntax's ends, the ones that are the arguments' own first text
 * left to them (GLM's `<arg_key>` straight after the name, Gemma's `{`).
 */
function nameEnd(body: Named): string {
  const start = argsStart(body.args);
  const ends = body.nameEnd.filter((end) => end !== start);
  if (ends.length === 0) return '';
  return `(${ends.map(lit).join(' | ')})${ends.length < body.nameEnd.length ? '?' : ''}`;
}

/** The text that begins an argument syntax's own text. */
function argsStart(args: ArgSyntax): string {
  return args.kind === 'tagged' ? args.keyOpen : args.kind === 'dict' || !args.fence ? '{' : '```';
}

/** One tool's arguments in a named call's syntax. */
function argumentsOf(args: ArgSyntax, rules: Rules, i: number, schema: ObjectSchema, jsonRoot?: string): string {
  switch (args.kind) {
    case 'tagged': {
      const values = new Values(rules, tagValues(rules, args.valueClose));
      const required = new Set(schema.required ?? []);
      // Tags need no separator: each declared parameter once, in order, the required ones always.
      return Object.entries(schema.properties ?? {})
        .map(([key, property], j) => {
          const name = rules.add(`param-${i}-${j}`, parameter(args, key, values.of(property)));
          return required.has(key) ? `ws ${name}` : `(ws ${name})?`;
        })
        .join(' ');
    }
    case 'dict': {
      const values = new Values(rules, dictValues(rules, args.quote));
      return `"{" ${members(rules, `args-${i}`, schema, (key, property) => `${lit(key)} ":" ${values.of(property)}`)} "}"`;
    }
    case 'json': {
      const object = jsonRoot ?? jsonObject(rules);
      return args.fence ? `"\`\`\`json\\n" ${object} "\\n\`\`\`"` : object;
    }
  }
}

/** One argument: its key between the key's tags, then its value between the value's. */
function parameter(args: Extract<ArgSyntax, { kind: 'tagged' }>, key: string, value: string): string {
  const open = args.valueOpen ? ` ws ${lit(args.valueOpen)}` : '';
  // A value on lines of its own (Qwen3-Coder's): the newlines around it are layout.
  const around = args.trimNewline ? ' "\\n"?' : '';
  return `${lit(args.keyOpen)} ${lit(key)} ${lit(args.keyClose)}${open}${around} ${value}${around} ${lit(args.valueClose)}`;
}

/** How a syntax writes the values the grammar narrows by type; the numbers are JSON's in every syntax. */
interface ValueSyntax {
  /** A string, or a value of no declared type (for a tag, the whole value's text). */
  string(): string;
  /** An object or an array. */
  structured(): string;
  /** A string value of one of these texts. */
  choice?(choices: readonly string[]): string;
  readonly boolean?: string;
}

/** Any JSON value, white space bounded. */
function jsonValue(rules: Rules): string {
  const string = rules.once(
    'json-string',
    '"\\"" ([^"\\\\\\x00-\\x1f] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4}))* "\\""',
  );
  return structuredValue(rules, { prefix: 'json', string, key: string, ws: rules.once('json-ws', '[ \\t\\n]{0,8}') });
}

/**
 * Objects, arrays and scalars of one syntax, named `PREFIX-value`: JSON's (quoted keys, white space
 * between the parts) or Gemma 4's dict (bare keys, its own strings, no white space).
 */
function structuredValue(rules: Rules, syntax: { prefix: string; string: string; key: string; ws?: string }): string {
  const { prefix, string, key } = syntax;
  const ws = syntax.ws ? ` ${syntax.ws}` : '';
  const [value, member] = [`${prefix}-value`, `${prefix}-member`];
  rules.once('number', NUMBER);
  rules.once(value, `${prefix}-object | ${prefix}-array | ${string} | number | "true" | "false" | "null"`);
  rules.once(member, `${key}${ws} ":"${ws} ${value}${ws}`);
  rules.once(`${prefix}-object`, `"{"${ws} (${member} (","${ws} ${member})*)? "}"`);
  rules.once(`${prefix}-array`, `"["${ws} (${value}${ws} (","${ws} ${value}${ws})*)? "]"`);
  return value;
}

/** Any JSON object. */
function jsonObject(rules: Rules): string {
  jsonValue(rules);
  return 'json-object';
}

/** A tag's value: a string is any text that does not close it, an object or array JSON. */
function tagValues(rules: Rules, close: string): ValueSyntax {
  return { string: () => rules.once('text', until(close, rules)), structured: () => jsonValue(rules) };
}

/** Python literals (LFM2): strings in double quotes, `True`/`False`, lists and dicts as JSON writes them. */
function pythonValues(rules: Rules): ValueSyntax {
  return {
    string: () => rules.once('py-string', '"\\"" ([^"\\\\\\x00-\\x1f] | "\\\\" ["\\\\nt])* "\\""'),
    structured: () => jsonValue(rules),
    choice: (choices) =>
      `"\\"" (${choices.map((choice) => lit(choice.replace(/["\\\\]/g, '\\\\$&'))).join(' | ')}) "\\""`,
    boolean: '"True" | "False"',
  };
}

/** Gemma 4's dict: strings between its quote marker, bare keys, JSON's numbers, booleans and lists. */
function dictValues(rules: Rules, quote: string): ValueSyntax {
  const string = (): string =>
    rules.once('dict-string', `${lit(quote)} ${rules.once('dict-text', until(quote, rules))} ${lit(quote)}`);
  return {
    string,
    structured: () =>
      structuredValue(rules, {
        prefix: 'dict',
        string: string(),
        key: rules.once('dict-key', '[A-Za-z_] [A-Za-z0-9_-]{0,63}'),
      }),
    choice: (choices) => `${lit(quote)} (${choices.map(lit).join(' | ')}) ${lit(quote)}`,
  };
}

const INTEGER = '"-"? ([0-9] | [1-9] [0-9]{1,15})';
/** A JSON number, its digits bounded. */
const NUMBER = `${INTEGER} ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?`;

interface ObjectSchema {
  properties?: Record<string, Schema>;
  required?: readonly string[];
}

interface Schema {
  type?: string | readonly string[];
  enum?: readonly unknown[];
  const?: unknown;
}

/** The rules of a value by its schema's type, as `syntax` writes it; shared rules are written once. */
class Values {
  constructor(
    private readonly rules: Rules,
    private readonly syntax: ValueSyntax,
  ) {}

  of(schema: Schema): string {
    const choices = schema.const !== undefined ? [schema.const] : schema.enum;
    if (choices?.length && choices.every((choice) => typeof choice === 'string')) {
      const texts = choices as string[];
      return this.syntax.choice ? this.syntax.choice(texts) : `(${texts.map(lit).join(' | ')})`;
    }
    switch (schema.type) {
      case 'integer':
        return this.rules.once('integer', INTEGER);
      case 'number':
        return this.rules.once('number', NUMBER);
      case 'boolean':
        return this.syntax.boolean ? `(${this.syntax.boolean})` : this.rules.once('boolean', '"true" | "false"');
      case 'object':
      case 'array':
        return this.syntax.structured();
      default:
        return this.syntax.string();
    }
  }
}

/**
 * Text that does not contain `close`: each character is free but the first of `close`, which may
 * only start a run of `close`'s prefix that then breaks off (or starts again). Exact when the first
 * character of `close` appears in it only once (every tag: `</parameter>`, `</arg_value>`); the text
 * cannot end in a piece of `close`'s prefix, which the value's closing tag then completes.
 */
function until(close: string, rules: Rules): string {
  const first = close[0] ?? '';
  const step = (at: number): string => {
    const char = close[at] as string;
    const name = `until-${at}`;
    const next = at + 1 < close.length ? ` | ${lit(char)} ${step(at + 1)}` : '';
    rules.once(name, `[^${cls(char)}${cls(first)}] | ${lit(first)}+ until-1${next}`);
    return name;
  };
  if (close.length < 2) return `[^${cls(first)}]*`;
  step(1);
  return `([^${cls(first)}] | ${lit(first)}+ until-1)*`;
}
