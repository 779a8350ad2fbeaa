#!/usr/bin/env node
// Runs the compiled tests with node's test runner: unit specs (`*.spec.js` beside the code) and
// e2e suites (`test/dist/**/*.e2e.js`). E2E files run one at a time: each boots its own NATS and services.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { delimiter, dirname, join, resolve } from 'node:path';

const which = process.argv[2] ?? 'all';

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
const files = which === 'unit' ? unit : which === 'e2e' ? e2e : [...unit, ...e2e];
if (files.length === 0) {
  console.error('no compiled tests found: run `npm run build` first');
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
const result = spawnSync(process.execPath, ['--test', '--test-concurrency=1', '--test-reporter=spec', ...files], { stdio: 'inherit', env });
process.exit(result.status ?? 1);
