#!/usr/bin/env node
// Runs the compiled tests with node's test runner: unit specs (`*.spec.js` beside the code) and
// e2e suites (`test/dist/**/*.e2e.js`). Unit spec files run side by side, one per core (at least 2);
// then the e2e files, one at a time: each boots its own NATS and services.
//
//   node scripts/run-tests.mjs [unit|e2e|all] [file or part of a path ...]
//
// A file may be named by its source (`test/e2e/hostile.e2e.ts`, `apps/worker/src/engine/sampling.spec.ts`)
// or its compiled path, or by any part of a path (`hostile`): only the matching files run. Each run
// ends with the time each file took.
import { spawnSync } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { delimiter, dirname, join, resolve } from 'node:path';

const args = process.argv.slice(2);
const which = ['unit', 'e2e', 'all'].includes(args[0] ?? '') ? args.shift() : 'all';
/** A source path as the compiled file it becomes: `<pkg>/src/x.ts` → `<pkg>/dist/x.js`, `test/e2e/x.ts` → `test/dist/e2e/x.js`. */
const compiled = (path) =>
  path
    .replace(/^\.\//, '')
    .replace(/^test\/e2e\//, 'test/dist/e2e/')
    .replace(/^((?:apps|libs)\/[^/]+)\/src\//, '$1/dist/')
    .replace(/\.ts$/, '.js');
const filters = args.map(compiled);

function find(dir, suffix, out = []) {
  let entries;
  try {
    entries = readdirSync(dir);
  } catch {
    return out;
  }
  for (const name of entries) {
    if (name === 'node_modules') continue;
    const path = join(dir, name);
    if (statSync(path).isDirectory()) find(path, suffix, out);
    else if (name.endsWith(suffix)) out.push(path);
  }
  return out;
}

const unit = ['libs', 'apps'].flatMap((root) =>
  readdirSync(root).flatMap((pkg) => find(join(root, pkg, 'dist'), '.spec.js')),
);
const e2e = find('test/dist', '.e2e.js');
const chosen = which === 'unit' ? unit : which === 'e2e' ? e2e : [...unit, ...e2e];
const files = filters.length === 0 ? chosen : chosen.filter((file) => filters.some((filter) => file.includes(filter)));
if (files.length === 0) {
  console.error(
    filters.length === 0
      ? 'no compiled tests found: run `npm run build` first'
      : `no compiled test file matches ${args.join(', ')} (run \`npm run build\` after adding one)`,
  );
  process.exit(1);
}
// The e2e suites (and a few unit specs) start local nats-servers: fetch Debian's into .cortex/bin when
// none is installed (or say what to run), and put it on the tests' PATH. Only a Docker engine can
// stand in for it.
const env = { ...process.env };
if (process.env.CORTEX_TEST_NATS !== 'testcontainers') {
  const { ensureNatsServer, NatsServerInstallError } = await import('../libs/bus/dist/nats-server-install.js');
  try {
    const command = ensureNatsServer(resolve('.cortex/bin'), (line) => console.log(`tests: ${line}`));
    if (command !== 'nats-server') env.PATH = `${dirname(command)}${delimiter}${env.PATH ?? ''}`;
  } catch (error) {
    if (!(error instanceof NatsServerInstallError)) throw error;
    const docker = Boolean(process.env.DOCKER_HOST) || existsSync('/var/run/docker.sock');
    if (!docker) {
      console.error(`tests: ${error.message}`);
      process.exit(1);
    }
    console.log(`tests: ${error.message}; the suites run NATS in containers instead`);
  }
}
const reporters = [
  '--test-reporter=spec',
  '--test-reporter-destination=stdout',
  `--test-reporter=${resolve('scripts/file-times.mjs')}`,
  '--test-reporter-destination=stdout',
];
/** Runs `batch` in one test runner, `concurrency` files at a time; its exit status. */
function run(batch, concurrency) {
  if (batch.length === 0) return 0;
  const result = spawnSync(process.execPath, ['--test', `--test-concurrency=${concurrency}`, ...reporters, ...batch], {
    stdio: 'inherit',
    env,
  });
  return result.status ?? 1;
}
const units = files.filter((file) => file.endsWith('.spec.js'));
const suites = files.filter((file) => !file.endsWith('.spec.js'));
const unitStatus = run(units, Math.max(2, availableParallelism()));
const suiteStatus = run(suites, 1);
process.exit(unitStatus || suiteStatus);
