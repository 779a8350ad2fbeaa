import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { integerOption, listOption, parseCommandLine, UsageError, type ParsedCommandLine } from './args.js';
import { COMMANDS } from './commands.js';

const parse = (line: string): ParsedCommandLine => parseCommandLine(line === '' ? [] : line.split(' '), COMMANDS);

describe('cli args', () => {
  const runs: Array<[string, { command: string; values?: Record<string, unknown>; positionals?: string[] }]> = [
    ['serve', { command: 'serve', positionals: [] }],
    ['serve worker gateway', { command: 'serve', positionals: ['worker', 'gateway'] }],
    ['status --json', { command: 'status', values: { json: true } }],
    ['status --watch --interval 250', { command: 'status', values: { watch: true, interval: '250' } }],
    ['load cortex-chat --worker w1', { command: 'load', values: { worker: 'w1' }, positionals: ['cortex-chat'] }],
    [
      'load --worker=w1 cortex-chat --json',
      { command: 'load', values: { worker: 'w1', json: true }, positionals: ['cortex-chat'] },
    ],
    ['unpin cortex-chat', { command: 'unpin', positionals: ['cortex-chat'] }],
    ['fixtures out/models', { command: 'fixtures', positionals: ['out/models'] }],
    ['fixtures', { command: 'fixtures', positionals: [] }],
  ];
  for (const [line, expected] of runs) {
    it(`args - "${line}" runs ${expected.command}`, () => {
      const parsed = parse(line);
      assert.equal(parsed.kind, 'run');
      if (parsed.kind !== 'run') return;
      assert.equal(parsed.command, expected.command);
      assert.deepEqual({ ...parsed.values }, expected.values ?? {});
      assert.deepEqual(parsed.positionals, expected.positionals ?? []);
    });
  }

  const helps: Array<[string, RegExp]> = [
    ['', /^cortex — an inference gateway[\s\S]*cortex fixtures \[<dir>\]/],
    ['--help', /cortex load <model> \[options\]/],
    ['help load', /^usage: cortex load <model> \[options\]\n\nload a model now[\s\S]*--worker <id>[\s\S]*-h, --help/],
    ['fixtures --help', /^usage: cortex fixtures \[<dir>\]/],
    ['fixtures -h', /^usage: cortex fixtures \[<dir>\]/],
    ['serve --help', /^usage: cortex serve \[<service>\.\.\.\]/],
    ['status --help', /--interval <ms>/],
    // Help wins over what else is wrong on the line.
    ['load --bogus --help', /^usage: cortex load/],
    ['pin --help', /^usage: cortex pin <model>/],
  ];
  for (const [line, pattern] of helps) {
    it(`args - "${line}" shows help`, () => {
      const parsed = parse(line);
      assert.equal(parsed.kind, 'help');
      if (parsed.kind === 'help') assert.match(parsed.text, pattern);
    });
  }

  const refusals: Array<[string, string]> = [
    ['fixtures --out x', 'cortex fixtures: unknown option --out; run "cortex fixtures --help" to see its usage'],
    [
      'fixtures a b',
      'cortex fixtures takes at most 1 (<dir>), got "b" too; run "cortex fixtures --help" to see its usage',
    ],
    ['status --verbose', 'cortex status: unknown option --verbose; run "cortex status --help" to see its usage'],
    ['status extra', 'cortex status takes no arguments, got "extra" too; run "cortex status --help" to see its usage'],
    ['load', 'cortex load needs <model>; run "cortex load --help" to see its usage'],
    ['load cortex-chat --worker', 'cortex load: --worker needs a value; run "cortex load --help" to see its usage'],
    [
      'load cortex-chat --worker --json',
      'cortex load: --worker needs a value (the next argument is an option); run "cortex load --help" to see its usage',
    ],
    ['models --json=yes', 'cortex models: --json takes no value; run "cortex models --help" to see its usage'],
    ['pin -x m', 'cortex pin: unknown option -x; run "cortex pin --help" to see its usage'],
    ['frobnicate', 'unknown command "frobnicate" (run "cortex --help" to list the commands)'],
    ['--json', 'unknown option --json: a command comes first (run "cortex --help" to list them)'],
  ];
  for (const [line, message] of refusals) {
    it(`args - "${line}" is refused with a sentence saying what to run`, () => {
      assert.throws(
        () => parse(line),
        (error: unknown) => error instanceof UsageError && error.message === message,
      );
    });
  }

  it('args - every command has a --help that names each of its options', () => {
    for (const spec of COMMANDS) {
      const parsed = parse(`${spec.name} --help`);
      assert.equal(parsed.kind, 'help', spec.name);
      if (parsed.kind !== 'help') continue;
      for (const name of Object.keys(spec.options ?? {}))
        assert.match(parsed.text, new RegExp(`--${name}\\b`), `${spec.name} --${name}`);
    }
  });

  it('args - integer and list options', () => {
    assert.equal(integerOption({ interval: '250' }, 'interval', 'status', 100), 250);
    assert.equal(integerOption({}, 'interval', 'status', 100), undefined);
    assert.throws(
      () => integerOption({ interval: '50' }, 'interval', 'status', 100),
      /--interval must be a whole number, at least 100 \(got "50"\)/,
    );
    assert.throws(() => integerOption({ interval: '1.5' }, 'interval', 'status', 100), /got "1\.5"/);
    assert.deepEqual(listOption({ model: ['a,b', ' c '] }, 'model'), ['a', 'b', 'c']);
    assert.equal(listOption({}, 'model'), undefined);
  });
});
