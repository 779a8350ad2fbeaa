/*
 * Writing GBNF by hand: rules by name, literals and character classes escaped, and a separated list of
 * an object's declared members, each at most once in its declared order. The call grammars and the
 * JSON grammars' objects with optional properties (which node-llama-cpp's generator cannot write)
 * share them.
 */

/** Rules by name, in the order they were added. */
export class Rules {
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
export function lit(text: string): string {
  return `"${[...text].map(escape).join('')}"`;
}

/** A character inside a GBNF character class. */
export function cls(char: string): string {
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

/**
 * The declared parameters of `schema` as a separated list (`key=value, …`, `key:value,…`): each at
 * most once in its declared order, the required ones always. `first-K` is the list from parameter K
 * on with none written before it, `rest-K` what follows once one was; either may be empty where every
 * parameter from K on is optional.
 */
export function members<P>(
  rules: Rules,
  prefix: string,
  schema: { readonly properties?: Readonly<Record<string, P>>; readonly required?: readonly string[] },
  member: (key: string, property: P) => string,
  separator = '"," " "?',
): string {
  const required = new Set(schema.required ?? []);
  const items = Object.entries(schema.properties ?? {}).map(([key, property]) => ({
    text: member(key, property),
    required: required.has(key),
  }));
  let rest = '';
  let first = '';
  for (let k = items.length - 1; k >= 0; k--) {
    const { text, required: must } = items[k] as (typeof items)[number];
    const item = rules.add(`${prefix}-member-${k}`, text);
    const tail = rest ? ` ${rest}` : '';
    const written = `${item}${tail}`;
    const next = must ? written : first ? `${written} | ${first}` : `(${written})?`;
    rest = rules.add(`${prefix}-rest-${k}`, must ? `${separator} ${item}${tail}` : `(${separator} ${item})?${tail}`);
    first = rules.add(`${prefix}-first-${k}`, next);
  }
  return first;
}
