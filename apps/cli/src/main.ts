#!/usr/bin/env node
import 'reflect-metadata';
import { resolve } from 'node:path';
import { decodePullReply, PULL_REPLY_TIMEOUT_MS, Subjects } from '@cortex/contracts';
import { loadConfig } from '@cortex/config';
import { ensureFixtureModels } from '@cortex/fixtures';
import { integerOption, parseCommandLine, stringOption, UsageError } from './args.js';
import { COMMANDS } from './commands.js';
import { parseServiceNames, serveMany, serveOne } from './serve.js';
import { collectStatus, formatStatus, watchStatus } from './status.js';
import { healthCommand } from './health.js';
import { admin } from './admin.js';
import { PullProgress } from './pull-progress.js';
import { keysCommand } from './keys.js';
import { catalogueCommand } from './catalogue.js';
import { print, withBus } from './bus.js';

async function main(argv: string[]): Promise<void> {
  const line = parseCommandLine(argv, COMMANDS);
  if (line.kind === 'help') {
    console.log(line.text);
    return;
  }
  const { command, values, positionals } = line;
  const json = values.json === true;
  switch (command) {
    case 'serve': {
      const names = parseServiceNames(positionals);
      if (names.length === 1 && positionals.length === 1) return serveOne(names[0]!);
      return serveMany(names);
    }
    case 'status': {
      const interval = integerOption(values, 'interval', 'status', 100) ?? 1_000;
      if (values.interval !== undefined && values.watch !== true)
        throw new UsageError(
          'cortex status: --interval goes with --watch; run "cortex status --help" to see its usage',
        );
      return withBus('status', async (_bus, { nc }) => {
        if (values.watch === true) return watchStatus(nc, interval);
        const report = await collectStatus(nc);
        print(json, report, () => formatStatus(report));
      });
    }
    case 'health':
      process.exitCode = await healthCommand(json);
      return;
    case 'models':
    case 'load':
    case 'unload':
    case 'pin':
    case 'unpin':
      return admin(command, { model: positionals[0], worker: stringOption(values, 'worker'), json });
    case 'models add':
    case 'models set':
    case 'models remove':
      return catalogueCommand(command, values, positionals);
    case 'fixtures': {
      const dir = resolve(positionals[0] ?? loadConfig().config.worker.modelsDir);
      const paths = await ensureFixtureModels(dir, { log: (text) => console.log(text) });
      for (const [id, path] of Object.entries(paths)) console.log(`${id}\t${path}`);
      return;
    }
    case 'pull': {
      const worker = stringOption(values, 'worker');
      if (worker !== undefined || values.all === true) return pullOnWorkers(positionals[0], worker, json);
      return pullCommand(positionals[0], json);
    }
    case 'keys create':
    case 'keys list':
    case 'keys show':
    case 'keys update':
    case 'keys rotate':
    case 'keys revoke':
    case 'keys apply':
    case 'accounts list':
    case 'accounts set':
      return keysCommand(command, values, positionals);
    default:
      throw new UsageError(`"${command}" has no handler`);
  }
}

const argv = process.argv.slice(2);
main(argv).then(
  () => {
    // A command ends when its work does: a socket or timer something left behind (a connect to a
    // frozen NATS, a reply that never came) must not keep a cron job or a probe waiting. `serve` runs
    // until it is stopped, and stops itself.
    if (argv[0] !== 'serve') endProcess(process.exitCode === undefined ? 0 : Number(process.exitCode));
  },
  (error: Error) => {
    console.error(error.message.startsWith('cortex ') ? error.message : `cortex: ${error.message}`);
    endProcess(error instanceof UsageError ? 2 : 1);
  },
);

/** Exits once what was written to stdout and stderr has been handed to the OS. */
function endProcess(code: number): void {
  let pending = 2;
  const done = (): void => {
    if (--pending === 0) process.exit(code);
  };
  process.stdout.write('', done);
  process.stderr.write('', done);
}

type Pull = (
  config: unknown,
  log: (line: string) => void,
  options: { target?: string; onProgress?: (source: string, progress: { bytes: number; totalBytes: number }) => void },
) => Promise<Record<string, string>>;

/** `cortex pull [model|source]`: on this machine, into worker.models_dir, with progress. */
async function pullCommand(target: string | undefined, json: boolean): Promise<void> {
  // The worker's own resolution, loaded by path as `serve` loads services (no app imports another).
  const { pull } = (await import(new URL('../../worker/dist/pull.js', import.meta.url).href)) as { pull: Pull };
  const progress = new PullProgress(process.stdout, json);
  let current = '';
  const log = (line: string): void => {
    if (json) return;
    progress.done();
    console.log(line);
  };
  const paths = await pull(loadConfig().config, log, {
    ...(target !== undefined && { target }),
    onProgress: (source, { bytes, totalBytes }) => {
      if (source !== current) progress.done();
      current = source;
      progress.update(source, bytes, totalBytes);
    },
  });
  progress.done();
  if (json)
    for (const [source, path] of Object.entries(paths)) console.log(JSON.stringify({ source, path, done: true }));
  else console.log(`pull: ${Object.keys(paths).length} models in place`);
}

/** `cortex pull <model> --worker <id> | --all`: the workers download it ahead of any load (the router asks them over the bus). */
async function pullOnWorkers(model: string | undefined, worker: string | undefined, json: boolean): Promise<void> {
  if (!model)
    throw new UsageError('cortex pull --worker/--all needs <model>, a catalogue model; see cortex pull --help');
  await withBus('pull', async (bus) => {
    // Bounded as the router bounds each worker's pull; a worker that dies ends it at once.
    const reply = await bus.request(
      Subjects.routerPull,
      { model, ...(worker ? { worker } : { all: true }) },
      { timeoutMs: PULL_REPLY_TIMEOUT_MS, decode: decodePullReply },
    );
    print(json, reply, () =>
      reply.pulled
        .map((p) => `${reply.model} is on worker ${p.workerId}: ${p.path} (${(p.bytes / 2 ** 20).toFixed(1)} MiB)`)
        .join('\n'),
    );
  });
}
