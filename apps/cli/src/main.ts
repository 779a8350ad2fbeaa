#!/usr/bin/env node
import 'reflect-metadata';
import { resolve } from 'node:path';
import { connectBus } from '@cortex/bus';
import { loadConfig } from '@cortex/config';
import { ensureFixtureModels } from '@cortex/fixtures';
import { parseServiceNames, serveMany, serveOne } from './serve.js';
import { collectStatus, formatStatus, watchStatus } from './status.js';
import { admin } from './admin.js';

const USAGE = `cortex — an inference gateway for GPU fleets

usage:
  cortex serve                 run NATS (if none answers), router, translator, metrics, worker and gateway
  cortex serve <service...>    run only the named services (one name: in this process)
  cortex status [--json]       services, workers, devices, loaded models and in-flight requests
  cortex status --watch [--interval <ms>]  the same, kept up to date, with lifecycle events as they happen
  cortex models [--json]       the catalogue: where each model is loaded, pinned, context
  cortex load <model> [--worker <id>]    load a model now
  cortex unload <model> [--worker <id>]  unload a model (from every worker unless one is named)
  cortex pin <model> | cortex unpin <model>  keep a model loaded (never evicted), or stop
                               (these four print a sentence; --json prints the router's answer)
  cortex fixtures [dir]        write the generated fixture models (default .cortex/models)
  cortex pull                  put every catalogue model into worker.models_dir (fixtures written,
                               hf: and URLs downloaded, HF_TOKEN for gated ones), as a worker would

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
    case 'pull': {
      // The worker's own resolution, loaded by path as `serve` loads services (no app imports another).
      const { pull } = (await import(new URL('../../worker/dist/pull.js', import.meta.url).href)) as { pull: (config: unknown, log: (line: string) => void) => Promise<Record<string, string>> };
      const paths = await pull(loadConfig().config, (line) => console.log(line));
      console.log(`pull: ${Object.keys(paths).length} models in place`);
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
