#!/usr/bin/env node
// Runs the compiled tests with node's test runner: unit specs (`*.spec.js` beside the code) and
// e2e suites (`test/dist/**/*.e2e.js`). E2E files run one at a time: each boots its own NATS and services.
import { spawnSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

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
const result = spawnSync(process.execPath, ['--test', '--test-concurrency=1', '--test-reporter=spec', ...files], { stdio: 'inherit' });
process.exit(result.status ?? 1);
