import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findNatsServer, natsInstallPlan, type NatsInstallPlan, type NatsInstallProbe } from './nats-server-install.js';

describe('nats-server install plan', () => {
  const cases: Array<[string, NatsInstallProbe, NatsInstallPlan['kind'], RegExp | boolean]> = [
    [
      'Debian as a user: download and unpack, no list refresh',
      { platform: 'linux', debian: true, root: false },
      'debian',
      false,
    ],
    [
      'Debian as root: may refresh empty package lists first',
      { platform: 'linux', debian: true, root: true },
      'debian',
      true,
    ],
    [
      'other Linux: names the package managers and the release binaries',
      { platform: 'linux', debian: false, root: true },
      'manual',
      /apk add nats-server.*dnf install nats-server.*releases/,
    ],
    ['macOS: brew', { platform: 'darwin', debian: false, root: false }, 'manual', /brew install nats-server/],
    [
      'Windows: winget',
      { platform: 'win32', debian: false, root: false },
      'manual',
      /winget install NATSAuthors\.NATSServer/,
    ],
    [
      'anything else: the release binaries',
      { platform: 'freebsd', debian: false, root: false },
      'manual',
      /binary from https:\/\/github\.com\/nats-io\/nats-server\/releases on PATH/,
    ],
    ['apt-get on a Mac is not Debian', { platform: 'darwin', debian: true, root: false }, 'manual', /brew/],
  ];
  for (const [title, probe, kind, detail] of cases) {
    it(`nats-server install plan - ${title}`, () => {
      const plan = natsInstallPlan(probe);
      assert.equal(plan.kind, kind);
      if (plan.kind === 'debian') assert.equal(plan.refreshLists, detail);
      else assert.match(plan.howTo, detail as RegExp);
    });
  }
});

describe('nats-server lookup', () => {
  it('nats-server lookup - a binary in the local directory counts only when it runs', (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'cortex-nats-bin-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const env = { PATH: '/bin' }; // /bin/sh runs the scripts below; no nats-server lives there
    assert.equal(findNatsServer(dir, env), null);
    writeFileSync(join(dir, 'nats-server'), '#!/bin/sh\nexit 3\n', { mode: 0o755 });
    assert.equal(findNatsServer(dir, env), null, 'a binary that fails --version is not used');
    writeFileSync(join(dir, 'nats-server'), '#!/bin/sh\necho "nats-server: v0.0.0"\n', { mode: 0o755 });
    assert.equal(findNatsServer(dir, env), join(dir, 'nats-server'));
    const bin = mkdtempSync(join(tmpdir(), 'cortex-nats-path-'));
    t.after(() => rmSync(bin, { recursive: true, force: true }));
    writeFileSync(join(bin, 'nats-server'), '#!/bin/sh\necho "nats-server: v0.0.1"\n', { mode: 0o755 });
    assert.equal(findNatsServer(dir, { PATH: `${bin}:/bin` }), 'nats-server', 'the one on PATH wins');
  });
});
