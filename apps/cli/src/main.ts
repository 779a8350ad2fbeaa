#!/usr/bin/env node
import 'reflect-metadata';
import { resolve } from 'node:path';
import { connectBus } from '@cortex/bus';
import { loadConfig } from '@cortex/config';
import { ensureFixtureModels } from '@cortex/fixtures';
import { parseServiceNames, serveMany, serveOne } from './serve.js';
import { collectStatus, formatStatus } from './status.js';

const USAGE = `cortex — an inference gateway for GPU fleets

usage:
  cortex serve                 run NATS (if none answers), router, translator, metrics, worker and gateway
  cortex serve <service...>    run only the named services (one name: in this process)
  cortex status [--json]       services, workers, devices, loaded models and in-flight requests
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
      const nc = await connectBus({ url: config.nats.url, name: 'cortex-status' });
      try {
        const report = await collectStatus(nc);
        console.log(args.includes('--json') ? JSON.stringify(report, null, 2) : formatStatus(report));
      } finally {
        await nc.close();
      }
      return;
    }
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

main(process.argv.slice(2)).catch((error: Error) => {
  console.error(`cortex: ${error.message}`);
  process.exit(1);
});
