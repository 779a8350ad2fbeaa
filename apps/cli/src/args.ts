import { parseArgs } from 'node:util';

/** One option of a command: node's `parseArgs` shape plus what the help says about it. */
export interface OptionSpec {
  type: 'string' | 'boolean';
  short?: string;
  /** Repeatable (`--model a --model b`); its value is then a list. */
  multiple?: boolean;
  /** The placeholder in the help, e.g. `ms` in `--interval <ms>`. */
  value?: string;
  description: string;
}

export interface PositionalSpec {
  name: string;
  required?: boolean;
  /** Takes every remaining argument. */
  variadic?: boolean;
}

/** A command as data: the parser, the help text and the errors all come from it. */
export interface CommandSpec {
  /** One or two words: `status`, `keys create`. */
  name: string;
  summary: string;
  /** A paragraph under the usage line in `--help`. */
  details?: string;
  positionals?: PositionalSpec[];
  options?: Record<string, OptionSpec>;
}

export type OptionValues = Record<string, string | boolean | string[] | undefined>;

export type ParsedCommandLine =
  { kind: 'help'; text: string } | { kind: 'run'; command: string; values: OptionValues; positionals: string[] };

/** A command line that cannot run; the message says what was wrong and what to run. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

const HELP_OPTION: OptionSpec = { type: 'boolean', short: 'h', description: 'show this help' };

/**
 * Picks the command (the longest run of leading words that names one), then parses its options
 * strictly with node's `util.parseArgs`: an unknown option, a missing value or a missing or extra
 * argument is a UsageError naming the command's `--help`. `--help` anywhere shows the command's help.
 */
export function parseCommandLine(
  argv: readonly string[],
  commands: readonly CommandSpec[],
  program = 'cortex',
): ParsedCommandLine {
  const first = argv[0];
  if (first === undefined || first === 'help' || first === '--help' || first === '-h') {
    const topic = first === 'help' ? argv.slice(1).filter((a) => !a.startsWith('-')) : [];
    if (topic.length > 0) return parseCommandLine([...topic, '--help'], commands, program);
    return { kind: 'help', text: formatOverview(commands, program) };
  }
  const two = commands.find((c) => c.name === `${first} ${argv[1] ?? ''}`);
  const one = commands.find((c) => c.name === first);
  const spec = two ?? one;
  if (!spec) {
    const family = commands.filter((c) => c.name.startsWith(`${first} `));
    if (family.length > 0) {
      const rest = argv.slice(1);
      if (rest.length === 0 || rest[0] === '--help' || rest[0] === '-h')
        return { kind: 'help', text: formatOverview(family, program, first) };
      throw new UsageError(
        `"${first} ${rest[0]}" is not a command; ${program} ${first} has ` +
          `${family.map((c) => c.name.split(' ')[1]).join(', ')} (run "${program} ${first} --help")`,
      );
    }
    if (first.startsWith('-'))
      throw new UsageError(`unknown option ${first}: a command comes first (run "${program} --help" to list them)`);
    throw new UsageError(`unknown command "${first}" (run "${program} --help" to list the commands)`);
  }
  const words = spec.name.split(' ').length;
  const rest = argv.slice(words);
  const hint = `run "${program} ${spec.name} --help" to see its usage`;
  const options = { ...(spec.options ?? {}), help: HELP_OPTION };
  let parsed: { values: OptionValues; positionals: string[] };
  try {
    parsed = parseArgs({
      args: [...rest],
      options: Object.fromEntries(
        Object.entries(options).map(([name, o]) => [
          name,
          { type: o.type, ...(o.short && { short: o.short }), ...(o.multiple && { multiple: true }) },
        ]),
      ),
      allowPositionals: true,
      strict: true,
    }) as { values: OptionValues; positionals: string[] };
  } catch (error) {
    // A request for help wins over whatever else is wrong on the line.
    if (rest.includes('--help') || rest.includes('-h')) return { kind: 'help', text: formatHelp(spec, program) };
    throw new UsageError(`${program} ${spec.name}: ${describeParseError(error as Error & { code?: string })}; ${hint}`);
  }
  if (parsed.values.help === true) return { kind: 'help', text: formatHelp(spec, program) };
  delete parsed.values.help;
  const positionals = spec.positionals ?? [];
  const missing = positionals.filter((p, i) => p.required && parsed.positionals[i] === undefined);
  if (missing.length > 0) {
    throw new UsageError(`${program} ${spec.name} needs ${missing.map((p) => `<${p.name}>`).join(' ')}; ${hint}`);
  }
  const variadic = positionals.some((p) => p.variadic);
  if (!variadic && parsed.positionals.length > positionals.length) {
    const extra = parsed.positionals
      .slice(positionals.length)
      .map((a) => `"${a}"`)
      .join(', ');
    const takes =
      positionals.length === 0
        ? 'takes no arguments'
        : `takes at most ${positionals.length} (${positionals.map((p) => `<${p.name}>`).join(' ')})`;
    throw new UsageError(`${program} ${spec.name} ${takes}, got ${extra} too; ${hint}`);
  }
  return { kind: 'run', command: spec.name, values: parsed.values, positionals: parsed.positionals };
}

/** node's messages name the option; ours say it in one sentence. */
function describeParseError(error: Error & { code?: string }): string {
  const option = /'(-[^' ]+)/.exec(error.message)?.[1];
  switch (error.code) {
    case 'ERR_PARSE_ARGS_UNKNOWN_OPTION':
      return `unknown option ${option ?? error.message}`;
    case 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE':
      if (/argument missing/.test(error.message)) return `${option ?? 'an option'} needs a value`;
      if (/ambiguous/.test(error.message))
        return `${option ?? 'an option'} needs a value (the next argument is an option)`;
      return `${option ?? 'an option'} takes no value`;
    default:
      return error.message;
  }
}

function usageLine(spec: CommandSpec, program: string): string {
  const args = (spec.positionals ?? []).map((p) => {
    const name = `<${p.name}>${p.variadic ? '...' : ''}`;
    return p.required ? name : `[${name}]`;
  });
  const hasOptions = Object.keys(spec.options ?? {}).length > 0;
  return [program, spec.name, ...args, ...(hasOptions ? ['[options]'] : [])].join(' ');
}

export function formatHelp(spec: CommandSpec, program = 'cortex'): string {
  const lines = [`usage: ${usageLine(spec, program)}`, '', spec.summary];
  if (spec.details) lines.push('', spec.details);
  const options = Object.entries({ ...(spec.options ?? {}), help: HELP_OPTION }).map(([name, o]) => {
    const flag = `${o.short ? `-${o.short}, ` : ''}--${name}${o.type === 'string' ? ` <${o.value ?? 'value'}>` : ''}`;
    return [flag, `${o.description}${o.multiple ? ' (repeatable)' : ''}`] as const;
  });
  const width = Math.max(...options.map(([flag]) => flag.length));
  lines.push('', 'options:', ...options.map(([flag, text]) => `  ${flag.padEnd(width)}  ${text}`));
  return lines.join('\n');
}

export function formatOverview(commands: readonly CommandSpec[], program = 'cortex', family?: string): string {
  const rows = commands.map((c) => [usageLine(c, program), c.summary] as const);
  const width = Math.min(48, Math.max(...rows.map(([u]) => u.length)));
  const lines = family
    ? [`usage: ${program} ${family} <command> [options]`, '', 'commands:']
    : [`${program} — an inference gateway for GPU fleets`, '', 'usage:'];
  for (const [usage, summary] of rows) {
    lines.push(
      usage.length > width ? `  ${usage}\n  ${''.padEnd(width)}  ${summary}` : `  ${usage.padEnd(width)}  ${summary}`,
    );
  }
  lines.push('', `"${program} ${family ? `${family} ` : ''}<command> --help" shows a command's options.`);
  if (!family)
    lines.push(
      'environment: CORTEX_CONFIG (default config/cortex.yaml), CORTEX_NATS_URL, CORTEX_LISTEN, ... (see docs/configuration.md)',
    );
  return lines.join('\n');
}

/** A string option's value, or undefined. */
export function stringOption(values: OptionValues, name: string): string | undefined {
  const value = values[name];
  return typeof value === 'string' ? value : undefined;
}

/** A repeatable string option's values, comma-separated lists split too (`--model a,b --model c`). */
export function listOption(values: OptionValues, name: string): string[] | undefined {
  const value = values[name];
  if (value === undefined || typeof value === 'boolean') return undefined;
  const list = (Array.isArray(value) ? value : [value])
    .flatMap((v) => v.split(','))
    .map((v) => v.trim())
    .filter(Boolean);
  return list;
}

/** An integer option (`--interval 500`), or a UsageError naming it and the range. */
export function integerOption(
  values: OptionValues,
  name: string,
  command: string,
  min = 0,
  program = 'cortex',
): number | undefined {
  const raw = stringOption(values, name);
  if (raw === undefined) return undefined;
  const value = Number(raw);
  if (!/^-?\d+$/.test(raw.trim()) || !Number.isSafeInteger(value) || value < min) {
    throw new UsageError(
      `${program} ${command}: --${name} must be a whole number, at least ${min} ` +
        `(got "${raw}"); run "${program} ${command} --help" to see its usage`,
    );
  }
  return value;
}
