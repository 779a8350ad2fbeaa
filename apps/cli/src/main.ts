#!/usr/bin/env node
import 'reflect-metadata';
import { resolve } from 'node:path';
import { connectBus } from '@cortex/bus';
import { loadConfig } from '@cortex/config';
import { ensureFixtureModels } from '@cortex/fixtures';
import { parseServiceNames, serveMany, serveOne } from './serve.js';
import { collectStatus, formatModels, formatStatus, watchStatus } from './status.js';
import { BusClient } from '@cortex/bus';
import { decodeCatalogue, Subjects } from '@cortex/contracts';

const USAGE = `cortex — an inference gateway for GPU fleets

usage:
  cortex serve                 run NATS (if none answers), router, translator, metrics, worker and gateway
  cortex serve <service...>    run only the named services (one name: in this process)
  cortex status [--json]       services, workers, devices, loaded models and in-flight requests
  cortex status --watch [--interval <ms>]  the same, kept up to date, with lifecycle events as they happen
  cortex models                the catalogue: where each model is loaded, pinned, context
  cortex load <model> [--worker <id>]    load a model now
  cortex unload <model> [--worker <id>]  unload a model (from every worker unless one is named)
  cortex pin <model> | cortex unpin <model>  keep a model loaded (never evicted), or stop
  cortex fixtures [dir]        write the generated fixture models (default .cortex/models)

environment: CORTEX_CONFIG (default config/cortex.yaml), CORTEX_NATS_URL, CORTEX_LISTEN, ... (see README)`;

async function main(argv: string[]): Promise<void> {
  const [command, ...args] = argv;
  switch (command) {
    case 'serve': {
      const names = parseServiceNames(args);
      if (names.length === 1 && args.length === 1) return serveOne(names[0]!);
      return serveMany(names);
    }
    case 'status': {
      const { config } = loadConfig();
      const nc = await connectBus({ url: config.nats.url, auth: config.nats, name: 'cortex-status' });
      try {
        if (args.includes('--watch')) {
          const at = args.indexOf('--interval');
          const interval = at === -1 ? 1_000 : Number(args[at + 1]);
          if (!Number.isInteger(interval) || interval < 100) throw new Error('--interval: milliseconds, at least 100');
          return await watchStatus(nc, interval);
        }
        const report = await collectStatus(nc);
        console.log(args.includes('--json') ? JSON.stringify(report, null, 2) : formatStatus(report));
      } finally {
        await nc.close();
      }
      return;
    }
    case 'models':
    case 'load':
    case 'unload':
    case 'pin':
    case 'unpin':
      return admin(command, args);
    case 'fixtures': {
      const dir = resolve(args[0] ?? loadConfig().config.worker.modelsDir);
      const paths = await ensureFixtureModels(dir, { log: (line) => console.log(line) });
      for (const [id, path] of Object.entries(paths)) console.log(`${id}\t${path}`);
      return;
    }
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      console.log(USAGE);
      return;
    default:
      throw new Error(`unknown command "${command}"\n\n${USAGE}`);
  }
}

/** Fleet operations, sent to a router over the bus. */
async function admin(command: string, args: string[]): Promise<void> {
  const { config } = loadConfig();
  const nc = await connectBus({ url: config.nats.url, auth: config.nats, name: 'cortex-admin' });
  const bus = new BusClient(nc, config.gateway.placementTimeoutMs);
  try {
    if (command === 'models') {
      console.log(formatModels(await bus.request(Subjects.routerModels, {}, { decode: decodeCatalogue })));
      return;
    }
    const model = args.find((arg, i) => !arg.startsWith('--') && args[i - 1] !== '--worker');
    if (!model) throw new Error(`usage: cortex ${command} <model>${command === 'load' || command === 'unload' ? ' [--worker <id>]' : ''}`);
    const at = args.indexOf('--worker');
    const worker = at === -1 ? undefined : args[at + 1];
    const subject = { load: Subjects.routerLoad, unload: Subjects.routerUnload, pin: Subjects.routerPin, unpin: Subjects.routerPin }[command]!;
    const payload = command === 'pin' || command === 'unpin' ? { model, pinned: command === 'pin' } : { model, ...(worker && { worker }) };
    console.log(JSON.stringify(await bus.request(subject, payload), null, 2));
  } finally {
    await nc.close();
  }
}

main(process.argv.slice(2)).catch((error: Error) => {
  console.error(`cortex: ${error.message}`);
  process.exit(1);
});
