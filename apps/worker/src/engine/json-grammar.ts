import type { Llama, LlamaGrammar } from 'node-llama-cpp';
import { lit, members, Rules } from './gbnf-rules.js';

/**
 * Number rules for the JSON grammars. node-llama-cpp's own let an integer carry an exponent
 * (`5344E64698663`) and a number take a 16-digit exponent, which parses to `Infinity` (and to `null`
 * once re-serialized). Ours: an integer is at most 15 digits with no fraction or exponent, so it is
 * always a safe integer; a number has at most 15 digits on each side of the point and an exponent of
 * at most two digits, so it is always finite.
 */
const DIGITS = '("0" | [1-9] [0-9]{0,14})';
const FRACTION_AND_EXPONENT = '("." [0-9]{1,15})? ([eE] [-+]? [0-9]{1,2})?';
export const INTEGER_RULE = `"-"? ${DIGITS}`;
export const NUMBER_RULE = `${INTEGER_RULE} ${FRACTION_AND_EXPONENT}`;

/**
 * Stand-ins for numbers the generator cannot bound below: `grammarSchema` writes one as a `const`
 * string and `boundNumbers` swaps the literal it becomes for the rule (a minimum of 0 drops the sign).
 */
const SIGNLESS: Readonly<Record<string, string>> = {
  'cortex-grammar:positive-integer': '[1-9] [0-9]{0,14}',
  'cortex-grammar:non-negative-integer': DIGITS,
  'cortex-grammar:non-negative-number': `${DIGITS} ${FRACTION_AND_EXPONENT}`,
};

/** The rule names node-llama-cpp's JSON-schema grammar generator gives its number rules. */
const SCHEMA_RULES: Readonly<Record<string, string>> = {
  'integer-number-rule': INTEGER_RULE,
  'fractional-number-rule': NUMBER_RULE,
};

/**
 * Replaces the number rules of a grammar node-llama-cpp generated (from a JSON schema, or its
 * built-in `json` grammar) with the bounded ones. Throws if a grammar has a number rule this does not
 * recognise, so a change in the generator is found by the tests rather than silently unbounded.
 */
export function boundNumbers(grammar: string): string {
  let text = grammar;
  for (const [stand, rule] of Object.entries(SIGNLESS)) text = text.replaceAll(`"\\"${stand}\\""`, `(${rule})`);
  return text
    .split('\n')
    .map((line) => {
      const rule = /^([a-z][a-z0-9-]*)\s*::=/.exec(line)?.[1];
      if (rule === undefined) return line;
      const bounded = SCHEMA_RULES[rule];
      if (bounded) return `${rule} ::= ${bounded}`;
      // The built-in json grammar: `number ::= <number> ws`.
      if (rule === 'number') return `number ::= (${NUMBER_RULE}) ws`;
      if (/number/.test(rule)) throw new Error(`unrecognised number rule in a JSON grammar: ${line}`);
      return line;
    })
    .join('\n');
}

/** Keywords whose values are data, not schemas. */
const DATA_KEYWORDS = new Set(['enum', 'const', 'default', 'examples', 'required']);
/** Keywords whose values map names to schemas. */
const NAME_MAPS = new Set(['properties', 'patternProperties', '$defs', 'definitions', 'dependentSchemas']);

/** Integer ranges up to this size are written out as an enum, so the grammar itself keeps them in bounds. */
const MAX_ENUM_RANGE = 64;

/**
 * Rewrites a client's JSON schema into one node-llama-cpp's generator reads as meant: it knows
 * `oneOf` but not `anyOf` (which it turns into `null`; zod writes optional and nullable fields as
 * `anyOf`), and it ignores `minimum`/`maximum`, so a small integer range becomes an enum. It holds
 * every property of an object as required: given `objects`, an object with optional properties
 * becomes a stand-in, collected there, whose rule schemaGrammar writes itself. Anything else the
 * grammar cannot hold is left to the validation of the final object.
 */
export function grammarSchema(schema: unknown, objects?: OptionalObject[]): unknown {
  if (Array.isArray(schema)) return schema.map((item) => grammarSchema(item, objects));
  if (schema === null || typeof schema !== 'object') return schema;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(schema as Record<string, unknown>)) {
    if (DATA_KEYWORDS.has(key)) out[key] = value;
    else if (NAME_MAPS.has(key) && value !== null && typeof value === 'object') {
      out[key] = Object.fromEntries(Object.entries(value).map(([name, sub]) => [name, grammarSchema(sub, objects)]));
    } else out[key === 'anyOf' ? 'oneOf' : key] = grammarSchema(value, objects);
  }
  const range = integerRange(out);
  if (range) {
    const values = Array.from({ length: range.max - range.min + 1 }, (_, i) => range.min + i);
    delete out.type;
    out.enum = values;
    return out;
  }
  const optional = objects ? optionalObject(out) : null;
  if (optional && objects) {
    objects.push(optional);
    return { const: `${OBJECT_STAND}${objects.length - 1}` };
  }
  const stand = signless(out);
  return stand ? { const: stand } : out;
}

/** An object whose properties are not all required, as schemaGrammar writes it: its properties' schemas rewritten. */
export interface OptionalObject {
  readonly properties: Readonly<Record<string, unknown>>;
  readonly required: readonly string[];
}

/** The stand-in for an object with optional properties (its index in the collected list follows). */
const OBJECT_STAND = 'cortex-grammar:object:';

/** The keywords of a plain object schema: its members, and annotations that constrain nothing. */
const PLAIN_OBJECT_KEYS = new Set([
  'type',
  'properties',
  'required',
  'additionalProperties',
  '$schema',
  '$id',
  '$comment',
  'title',
  'description',
  'default',
  'examples',
  'deprecated',
  'readOnly',
  'writeOnly',
]);

/**
 * A plain object schema (`properties`, `required`, no extra properties) with a property that is not
 * required, or null. One that allows other properties, or combines schemas, stays node-llama-cpp's.
 */
function optionalObject(schema: Record<string, unknown>): OptionalObject | null {
  const { properties, required, additionalProperties, type } = schema;
  if (type !== 'object' || properties === null || typeof properties !== 'object') return null;
  if (Object.keys(schema).some((key) => !PLAIN_OBJECT_KEYS.has(key))) return null;
  if (additionalProperties !== undefined && additionalProperties !== false) return null;
  const keys = Object.keys(properties);
  const needed = Array.isArray(required) ? required.filter((key): key is string => typeof key === 'string') : [];
  if (keys.length === 0 || keys.every((key) => needed.includes(key))) return null;
  return { properties: properties as Record<string, unknown>, required: needed };
}

/** The stand-in for an integer or number whose minimum leaves no room for a sign, or null. */
function signless(schema: Record<string, unknown>): string | null {
  if (
    (schema.type !== 'integer' && schema.type !== 'number') ||
    schema.enum !== undefined ||
    schema.const !== undefined
  )
    return null;
  const low = bound(schema.minimum, schema.exclusiveMinimum, Math.ceil, 1);
  if (low === null || low < 0) return null;
  if (schema.type === 'number') return 'cortex-grammar:non-negative-number';
  return low >= 1 ? 'cortex-grammar:positive-integer' : 'cortex-grammar:non-negative-integer';
}

function integerRange(schema: Record<string, unknown>): { min: number; max: number } | null {
  if (schema.type !== 'integer' || schema.enum !== undefined || schema.const !== undefined) return null;
  const low = bound(schema.minimum, schema.exclusiveMinimum, Math.ceil, 1);
  const high = bound(schema.maximum, schema.exclusiveMaximum, Math.floor, -1);
  if (low === null || high === null || high < low || high - low >= MAX_ENUM_RANGE) return null;
  return { min: low, max: high };
}

/** An inclusive integer bound from `minimum`/`exclusiveMinimum` (draft 6+ numbers), or null. */
function bound(inclusive: unknown, exclusive: unknown, round: (x: number) => number, step: number): number | null {
  const candidates: number[] = [];
  if (typeof inclusive === 'number' && Number.isFinite(inclusive)) candidates.push(round(inclusive));
  if (typeof exclusive === 'number' && Number.isFinite(exclusive)) {
    const rounded = round(exclusive);
    candidates.push(rounded === exclusive ? rounded + step : rounded);
  }
  if (candidates.length === 0) return null;
  return step > 0 ? Math.max(...candidates) : Math.min(...candidates);
}

/** A grammar's text and the stop settings node-llama-cpp generated it with. */
interface GeneratedGrammar {
  readonly grammar: string;
  readonly stopGenerationTriggers: Awaited<ReturnType<Llama['createGrammarForJsonSchema']>>['stopGenerationTriggers'];
  readonly trimWhitespaceSuffix: boolean;
}

/** The run of newlines node-llama-cpp's JSON grammars end their root with (its stop trigger). */
const ROOT_STOP = /^(root\s*::=.*?)\s*"(?:\\n)+" \[\\n\]\*\s*$/m;

/**
 * The GBNF of JSON of `schema`, numbers bounded: node-llama-cpp writes it, except each object with
 * optional properties, whose rule is written here (its members at most once each, in declared order,
 * the required ones always, as llama.cpp's own converter writes them) over node-llama-cpp's rules of
 * its properties' values. A schema with `$ref`s is node-llama-cpp's alone (a property's schema cannot
 * be generated apart from its definitions): its objects hold every property as required.
 */
export async function schemaGrammar(llama: Llama, schema: Record<string, unknown>): Promise<GeneratedGrammar> {
  const objects: OptionalObject[] = [];
  const refs = JSON.stringify(schema).includes('"$ref"');
  const generated = await llama.createGrammarForJsonSchema(grammarSchema(schema, refs ? undefined : objects) as never);
  const stops = {
    stopGenerationTriggers: generated.stopGenerationTriggers,
    trimWhitespaceSuffix: generated.trimWhitespaceSuffix,
  };
  if (objects.length === 0) return { ...stops, grammar: boundNumbers(generated.grammar) };
  const rules = new Rules();
  const values: string[] = [];
  // An object's rule names its values' roots, which may stand in for objects collected before it.
  for (const [i, object] of objects.entries()) {
    const keys = Object.keys(object.properties);
    const roots = await Promise.all(
      keys.map(async (key, j) => {
        const value = await llama.createGrammarForJsonSchema(object.properties[key] as never);
        values.push(renameRules(boundNumbers(value.grammar).replace(ROOT_STOP, '$1'), `cgo${i}-v${j}-`));
        return `cgo${i}-v${j}-root`;
      }),
    );
    const list = members(
      rules,
      `cgo${i}`,
      object,
      (key) => `${lit(JSON.stringify(key))} ":" [ ]? ${roots[keys.indexOf(key)] as string}`,
      '"," cgo-ws',
    );
    rules.add(`cgo${i}`, `"{" cgo-ws ${list} cgo-ws "}"`);
  }
  rules.add('cgo-ws', '[ ]? | [\\n] [ \\t]{0,16}');
  let text = [boundNumbers(generated.grammar), ...values, rules.text()].join('\n');
  for (let i = objects.length - 1; i >= 0; i--)
    text = text.replaceAll(lit(JSON.stringify(`${OBJECT_STAND}${i}`)), `cgo${i}`);
  return { ...stops, grammar: text };
}

/**
 * A grammar for JSON of `schema` (any JSON when null) with bounded numbers (see schemaGrammar),
 * compiled with node-llama-cpp's stop triggers.
 */
export async function createJsonGrammar(
  llama: Llama,
  schema: Record<string, unknown> | null,
  options: { padded?: boolean } = {},
): Promise<LlamaGrammar> {
  const generated = schema
    ? await schemaGrammar(llama, schema)
    : await llama.getGrammarFor('json').then((json) => ({
        grammar: boundNumbers(json.grammar),
        stopGenerationTriggers: json.stopGenerationTriggers,
        trimWhitespaceSuffix: json.trimWhitespaceSuffix,
      }));
  return llama.createGrammar({
    grammar: options.padded ? padded(generated.grammar) : generated.grammar,
    stopGenerationTriggers: generated.stopGenerationTriggers,
    trimWhitespaceSuffix: generated.trimWhitespaceSuffix,
  });
}

/**
 * The grammar with a little white space allowed around its value: a model writes its call's JSON on a
 * line of its own (`<tool_call>\n{…}\n</tool_call>`), and a token may carry the newlines with the JSON.
 */
export function padded(grammar: string): string {
  const lines = grammar.split('\n');
  const root = lines.findIndex((line) => /^root\s*::=/.test(line));
  if (root === -1) throw new Error('a JSON grammar without a root rule');
  lines[root] = (lines[root] as string).replace(/^root\s*::=/, 'padded-value ::=');
  return [...lines, 'root ::= [ \\t\\n]{0,3} padded-value [ \\t\\n]{0,3}'].join('\n');
}

/**
 * The rules of JSON of each schema (any JSON object where one is missing, or cannot be written), as
 * node-llama-cpp writes them with bounded numbers and without the run of newlines its grammars stop
 * on, renamed `jN-…` so that several sit in one grammar beside its own rules: a call grammar's JSON
 * arguments (see wholeCallGrammar).
 */
export async function jsonArgumentRules(
  llama: Llama,
  schemas: ReadonlyArray<Record<string, unknown> | undefined>,
): Promise<{ roots: string[]; rules: string }> {
  const any = { type: 'object', additionalProperties: true };
  const texts = await Promise.all(
    schemas.map(async (schema, i) => {
      const generated = await schemaGrammar(llama, schema ?? any).catch(() => schemaGrammar(llama, any));
      const text = generated.grammar.replace(ROOT_STOP, '$1');
      return renameRules(text, `j${i}-`);
    }),
  );
  return { roots: schemas.map((_, i) => `j${i}-root`), rules: texts.join('\n') };
}

/** A GBNF grammar with every rule name prefixed; literals and character classes are left as they are. */
export function renameRules(grammar: string, prefix: string): string {
  let out = '';
  for (let at = 0; at < grammar.length;) {
    const char = grammar[at] as string;
    if (char === '"' || char === '[') {
      const close = char === '"' ? '"' : ']';
      let end = at + 1;
      while (end < grammar.length && grammar[end] !== close) end += grammar[end] === '\\' ? 2 : 1;
      out += grammar.slice(at, end + 1);
      at = end + 1;
      continue;
    }
    const name = /^[a-zA-Z][a-zA-Z0-9-]*/.exec(grammar.slice(at, at + 128))?.[0];
    if (name) {
      out += prefix + name;
      at += name.length;
      continue;
    }
    out += char;
    at++;
  }
  return out;
}
