import { spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

/** Where cortex keeps a nats-server it fetched itself, relative to the working directory (like `.cortex/nats`). */
export const LOCAL_NATS_BIN_DIR = '.cortex/bin';

/** What this machine offers for getting nats-server without a package install. */
export interface NatsInstallProbe {
  platform: NodeJS.Platform;
  /** `apt-get` and `dpkg-deb` both run: a Debian or Ubuntu system. */
  debian: boolean;
  root: boolean;
}

export type NatsInstallPlan =
  /** Download Debian's package with `apt-get download` and unpack it with `dpkg-deb -x`: no root needed. */
  | { kind: 'debian'; refreshLists: boolean }
  /** Nothing to fetch with here: `howTo` says exactly what to run. */
  | { kind: 'manual'; howTo: string };

const RELEASES = 'https://github.com/nats-io/nats-server/releases';

/**
 * How to get nats-server on this machine. On Debian/Ubuntu the package is downloaded and unpacked (no
 * root); root may also refresh the package lists when they are empty (a fresh container). Elsewhere the
 * answer names the command for that system.
 */
export function natsInstallPlan(probe: NatsInstallProbe): NatsInstallPlan {
  if (probe.platform === 'linux' && probe.debian) return { kind: 'debian', refreshLists: probe.root };
  if (probe.platform === 'darwin')
    return { kind: 'manual', howTo: `run \`brew install nats-server\` (or download it from ${RELEASES})` };
  if (probe.platform === 'win32')
    return { kind: 'manual', howTo: `run \`winget install NATSAuthors.NATSServer\` (or download it from ${RELEASES})` };
  if (probe.platform === 'linux') {
    return {
      kind: 'manual',
      howTo:
        `install your distribution's nats-server package (Alpine: \`apk add nats-server\`; ` +
        `Fedora: \`dnf install nats-server\`) or put the binary from ${RELEASES} on PATH`,
    };
  }
  return { kind: 'manual', howTo: `put the nats-server binary from ${RELEASES} on PATH` };
}

export class NatsServerInstallError extends Error {
  override name = 'NatsServerInstallError';
}

function runs(command: string, args: string[] = ['--version'], env: NodeJS.ProcessEnv = process.env): boolean {
  return spawnSync(command, args, { stdio: 'ignore', env }).status === 0;
}

function probe(): NatsInstallProbe {
  return {
    platform: process.platform,
    debian: runs('apt-get', ['--version']) && runs('dpkg-deb', ['--version']),
    root: process.getuid?.() === 0,
  };
}

/** The nats-server to run: the one on `env`'s PATH, else one fetched earlier into `dir`; null when there is neither. */
export function findNatsServer(dir = resolve(LOCAL_NATS_BIN_DIR), env: NodeJS.ProcessEnv = process.env): string | null {
  if (runs('nats-server', ['--version'], env)) return 'nats-server';
  const local = join(dir, 'nats-server');
  return existsSync(local) && runs(local, ['--version'], env) ? local : null;
}

/**
 * The nats-server to run, fetching Debian's package into `dir` when there is none (see natsInstallPlan).
 * Throws NatsServerInstallError, saying what to run, when it cannot.
 */
export function ensureNatsServer(
  dir = resolve(LOCAL_NATS_BIN_DIR),
  log: (line: string) => void = () => undefined,
): string {
  const found = findNatsServer(dir);
  if (found) return found;
  const plan = natsInstallPlan(probe());
  if (plan.kind === 'manual')
    throw new NatsServerInstallError(
      `nats-server is not installed: ${plan.howTo}, or set CORTEX_NATS_URL to a running server`,
    );
  log(`nats-server is not installed: fetching Debian's package into ${dir}`);
  const work = mkdtempSync(join(tmpdir(), 'cortex-nats-deb-'));
  try {
    const download = (): ReturnType<typeof spawnSync> =>
      spawnSync('apt-get', ['download', 'nats-server'], { cwd: work, encoding: 'utf8', timeout: 120_000 });
    let result = download();
    // A fresh container has no package lists; only root can fetch them.
    if (result.status !== 0 && plan.refreshLists) {
      log('apt-get download found no nats-server package: refreshing the package lists (apt-get update)');
      spawnSync('apt-get', ['update', '-qq'], { stdio: 'ignore', timeout: 300_000 });
      result = download();
    }
    const deb = readdirSync(work).find((name) => name.startsWith('nats-server_') && name.endsWith('.deb'));
    if (result.status !== 0 || !deb) {
      throw new NatsServerInstallError(
        `nats-server is not installed and \`apt-get download nats-server\` ` +
          `failed (${String(result.stderr).trim() || `exit ${result.status}`}): ` +
          'run `sudo apt-get update && sudo apt-get install nats-server`, or set CORTEX_NATS_URL to a running server',
      );
    }
    const unpacked = join(work, 'x');
    const unpack = spawnSync('dpkg-deb', ['-x', join(work, deb), unpacked], { encoding: 'utf8', timeout: 60_000 });
    const binary = ['usr/sbin/nats-server', 'usr/bin/nats-server']
      .map((path) => join(unpacked, path))
      .find((path) => existsSync(path));
    if (unpack.status !== 0 || !binary)
      throw new NatsServerInstallError(
        `could not unpack ${deb}: ${unpack.stderr.trim() || 'no nats-server binary in it'}`,
      );
    mkdirSync(dir, { recursive: true });
    // Copy then rename: a concurrent caller sees either no binary or a whole one.
    const partial = join(dir, `.nats-server.${process.pid}`);
    copyFileSync(binary, partial);
    chmodSync(partial, 0o755);
    renameSync(partial, join(dir, 'nats-server'));
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  const local = join(dir, 'nats-server');
  if (!runs(local)) throw new NatsServerInstallError(`the nats-server fetched into ${dir} does not run`);
  log(`fetched ${spawnSync(local, ['--version'], { encoding: 'utf8' }).stdout.trim()} into ${dir}`);
  return local;
}
