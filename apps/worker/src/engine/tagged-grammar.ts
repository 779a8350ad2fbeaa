import type { ToolDefinition } from '@cortex/contracts';
import type { ArgSyntax, ToolSyntax } from './formats/chat-format.js';

type Tagged = Extract<ArgSyntax, { kind: 'tagged' }>;
type Named = Extract<ToolSyntax['body'], { kind: 'named' }>;

/** The syntaxes a tagged call grammar is written for: the name as text, then one tag pair per argument. */
export function isTaggedSyntax(
  syntax: ToolSyntax | undefined,
): syntax is ToolSyntax & { body: Named & { args: Tagged } } {
  return syntax?.body.kind === 'named' && syntax.body.args.kind === 'tagged' && syntax.callClose !== undefined;
}

/** The markers a tagged call writes inside itself, through its closing one: its grammar writes them. */
export function taggedMarkers(syntax: ToolSyntax | undefined): string[] {
  if (!isTaggedSyntax(syntax)) return [];
  const { body } = syntax;
  const { args } = body;
  return [
    body.namePrefix,
    ...body.nameEnd,
    args.keyOpen,
    args.keyClose,
    args.valueOpen,
    args.valueClose,
    body.argsClose,
    syntax.callClose,
  ].filter((marker): marker is string => Boolean(marker));
}

/**
 * The GBNF of one call of `tools` in a tagged syntax (Qwen3-Coder's `<function=NAME>` with
 * `<parameter=KEY>` pairs, GLM's `<arg_key>`/`<arg_value>`, Seed-OSS's), from just after its opening
 * marker through its closing one, read from the same description the parser reads: the name one of the
 * tools', each declared parameter at most once in its declared order (the required ones always), each
 * value written as its schema's type — a number for an integer, `true` or `false` for a boolean, JSON
 * for an object or array, and for a string any text that does not close the value. So a forced call,
 * or any call of a `strict` tool, is one of the tools with arguments of its schema by construction, as
 * llama.cpp's server builds its grammar from the parser's description.
 */
export function taggedCallGrammar(syntax: ToolSyntax, tools: readonly ToolDefinition[]): string {
  if (!isTaggedSyntax(syntax)) throw new Error('not a tagged call syntax');
  const { body } = syntax;
  const { args } = body;
  const rules = new Rules();
  const value = new Values(rules, args.valueClose);
  const close = [...(body.argsClose ? [lit(body.argsClose)] : []), lit(syntax.callClose ?? '')].join(' ws ');
  // GLM ends a name where its first key opens, or with a newline before it.
  const ends = body.nameEnd.filter((end) => end !== args.keyOpen);
  const nameEnd =
    ends.length === 0 ? '' : `(${ends.map(lit).join(' | ')})${ends.length < body.nameEnd.length ? '?' : ''}`;
  const calls = tools.map((tool, i) => {
    const schema = (tool.parameters ?? {}) as { properties?: Record<string, unknown>; required?: readonly string[] };
    const required = new Set(schema.required ?? []);
    const params = Object.entries(schema.properties ?? {}).map(([key, property], j) => {
      const name = rules.add(`param-${i}-${j}`, parameter(args, key, value.of(property as Schema)));
      return required.has(key) ? `ws ${name}` : `(ws ${name})?`;
    });
    return rules.add(
      `call-${i}`,
      [...(body.namePrefix ? [lit(body.namePrefix)] : []), lit(tool.name), nameEnd, ...params, 'ws', close]
        .filter(Boolean)
        .join(' '),
    );
  });
  rules.add('root', `ws (${calls.join(' | ')})`);
  rules.add('ws', '[ \\t\\n]{0,3}');
  return rules.text();
}

/** One argument: its key between the key's tags, then its value between the value's. */
function parameter(args: Tagged, key: string, value: string): string {
  const open = args.valueOpen ? ` ws ${lit(args.valueOpen)}` : '';
  // A value on lines of its own (Qwen3-Coder's): the newlines around it are layout.
  const around = args.trimNewline ? ' "\\n"?' : '';
  return `${lit(args.keyOpen)} ${lit(key)} ${lit(args.keyClose)}${open}${around} ${value}${around} ${lit(args.valueClose)}`;
}

interface Schema {
  type?: string | readonly string[];
  enum?: readonly unknown[];
  const?: unknown;
}

/** The rules of a value by its schema's type; shared rules are written once. */
class Values {
  constructor(
    private readonly rules: Rules,
    private readonly valueClose: string,
  ) {}

  of(schema: Schema): string {
    const choices = schema.const !== undefined ? [schema.const] : schema.enum;
    if (choices?.length && choices.every((choice) => typeof choice === 'string'))
      return `(${(choices as string[]).map(lit).join(' | ')})`;
    switch (schema.type) {
      case 'integer':
        return this.rules.once('integer', '"-"? ([0-9] | [1-9] [0-9]{1,15})');
      case 'number':
        return this.number();
      case 'boolean':
        return this.rules.once('boolean', '"true" | "false"');
      case 'object':
      case 'array':
        return this.json();
      default:
        // A string, or a type the grammar does not narrow: text that does not close the value.
        return this.rules.once('text', until(this.valueClose, this.rules));
    }
  }

  /** A JSON number, its digits bounded. */
  private number(): string {
    return this.rules.once('number', '"-"? ([0-9] | [1-9] [0-9]{1,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?');
  }

  /** Any JSON value, white space bounded. */
  private json(): string {
    const { rules } = this;
    rules.once('json-ws', '[ \\t\\n]{0,8}');
    rules.once('json-string', '"\\"" ([^"\\\\\\x00-\\x1f] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4}))* "\\""');
    rules.once('json-value', `json-object | json-array | json-string | ${this.number()} | "true" | "false" | "null"`);
    rules.once('json-member', 'json-string json-ws ":" json-ws json-value json-ws');
    rules.once('json-object', '"{" json-ws (json-member ("," json-ws json-member)*)? "}"');
    rules.once('json-array', '"[" json-ws (json-value json-ws ("," json-ws json-value json-ws)*)? "]"');
    return 'json-value';
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

/** Rules by name, in the order they were added. */
class Rules {
  private readonly rules = new Map<string, string>();

  add(name: string, body: string): string {
    this.rules.set(name, body);
    return name;
  }

  /** A rule of a fixed name, added the first time it is asked for. */
  once(name: string, body: string): string {
    if (!this.rules.has(name)) this.rules.set(name, body);
    return name;
  }

  text(): string {
    return [...this.rules].map(([name, body]) => `${name} ::= ${body}`).join('\n');
  }
}

/** A GBNF string literal. */
function lit(text: string): string {
  return `"${[...text].map(escape).join('')}"`;
}

/** A character inside a GBNF character class. */
function cls(char: string): string {
  return /[\]\\^-]/.test(char) ? `\\${char}` : escape(char);
}

function escape(char: string): string {
  switch (char) {
    case '"':
      return '\\"';
    case '\\':
      return '\\\\';
    case '\n':
      return '\\n';
    case '\r':
      return '\\r';
    case '\t':
      return '\\t';
    default:
      return char;
  }
}
