// Starts rendered pods on this machine the way a kubelet and a container runtime would, with Linux's
// own isolation instead of a cluster (needs root, `ip`, `unshare`, `nsenter`, overlayfs):
//
// - network: a "node" network namespace holding a bridge (10.244.0.1/24) and one network namespace
//   per pod with its own IP on it, so each pod has its own ports (NATS's 4222 here is not the host's)
//   and reaches the others by IP; /etc/hosts in each pod resolves every Service name (headless per-pod
//   names too) in each DNS form, as cluster DNS would;
// - filesystem: per container a private mount namespace whose root is an overlay of the host's /
//   (which holds node and nats-server), the image's tree (this repository, built) bind-mounted at the
//   image's WORKDIR, each volumeMount bind-mounted at its mountPath (read-only where it says so), then
//   the root remounted read-only where readOnlyRootFilesystem says so, and chroot into it as the pod's
//   runAsUser/runAsGroup with fsGroup as a supplementary group;
// - probes: HTTP and TCP probes from the node namespace against the pod IP (scripts/k8s/probe-agent.mjs),
//   exec probes and preStop hooks with nsenter inside the container, as written in the manifest.
//
// The plans come from scripts/k8s/pod-plan.mjs. Everything is torn down at the end, on failure too.
import { spawn, spawnSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  closeSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readlinkSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import {
  containerArgv,
  containerEnv,
  hostsFile,
  podsOf,
  podVolumes,
  resolvePort,
  runAs,
  serviceLinks,
} from './pod-plan.mjs';

const IP = '/usr/sbin/ip';
/** How long a Job's pod may run before the check gives up on it. */
const JOB_MS = 60_000;
const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

/** Whether this machine can run pods here (root and the tools), and if not, why. */
export function sandboxSupport() {
  if (process.platform !== 'linux') return 'needs Linux (network and mount namespaces)';
  if (process.getuid?.() !== 0) return 'needs root (network namespaces, mounts, chroot)';
  for (const tool of [IP, '/usr/bin/unshare', '/usr/bin/nsenter', '/usr/sbin/chroot', '/usr/bin/mount']) {
    if (spawnSync(tool, ['--version']).error) return `needs ${tool}`;
  }
  return null;
}

function run(args, what) {
  const r = spawnSync(args[0], args.slice(1), { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${what}: ${args.join(' ')}: ${r.stderr || r.error?.message}`);
}

/**
 * A path as a container runtime resolves it inside the container's root (securejoin): symlinks on the
 * way are followed within that root (the host's / is the overlay's lower layer here), never out of it,
 * so /var/run/nats with /var/run -> /run is /run/nats in the root, not the host's /run.
 */
export function inRoot(path, lowerRoot = '/') {
  const parts = path.split('/').filter(Boolean);
  const resolved = [];
  for (let hops = 0; parts.length > 0;) {
    const part = parts.shift();
    if (part === '.') continue;
    if (part === '..') {
      resolved.pop();
      continue;
    }
    const host = join(lowerRoot, ...resolved, part);
    let link = null;
    try {
      if (lstatSync(host).isSymbolicLink()) link = readlinkSync(host);
    } catch {
      // not there yet: the runtime creates it
    }
    if (link === null) {
      resolved.push(part);
      continue;
    }
    if (++hops > 40) throw new Error(`${path}: too many symlinks`);
    if (link.startsWith('/')) resolved.length = 0;
    parts.unshift(...link.split('/').filter(Boolean));
  }
  return `/${resolved.join('/')}`;
}

const q = (s) => `'${String(s).replace(/'/g, `'\\''`)}'`;

/**
 * A started set of pods. `images(ref)` says how an image starts ({ entrypoint, cmd, env, workdir,
 * user, tree?, argv? }); `select(workload)` which workloads to start.
 */
export class Sandbox {
  constructor({ objects, images, log = () => {} }) {
    this.objects = objects;
    this.images = images;
    this.log = log;
    this.id = `ck8s${process.pid}`;
    this.base = mkdtempSync(join(tmpdir(), 'cortex-k8s-pods-'));
    this.namespaces = [];
    this.containers = [];
    this.pods = [];
    this.cleanup = () => this.destroySync();
    // Ctrl-C or a kill of the check must not leave pods, namespaces or mounts behind.
    this.interrupted = (signal) => {
      this.destroySync();
      process.exit(signal === 'SIGINT' ? 130 : 143);
    };
    process.on('exit', this.cleanup);
    process.once('SIGINT', this.interrupted);
    process.once('SIGTERM', this.interrupted);
  }

  /** Network first (every pod's IP is known before any starts, as DNS names are), then every container. */
  async start(workloads) {
    const services = this.objects.filter((o) => o.kind === 'Service');
    const node = `${this.id}-node`;
    this.netns(node);
    run([IP, '-n', node, 'link', 'set', 'lo', 'up'], 'node network');
    run([IP, '-n', node, 'link', 'add', 'br0', 'type', 'bridge'], 'node bridge');
    run([IP, '-n', node, 'addr', 'add', '10.244.0.1/24', 'dev', 'br0'], 'node bridge');
    run([IP, '-n', node, 'link', 'set', 'br0', 'up'], 'node bridge');
    this.node = node;

    this.pods = workloads.flatMap((w) => podsOf(w));
    this.pods.forEach((pod, i) => {
      pod.ip = `10.244.0.${10 + i}`;
      pod.netns = `${this.id}-p${i}`;
      this.netns(pod.netns);
      run(
        [IP, '-n', node, 'link', 'add', `vh${i}`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', pod.netns],
        'pod network',
      );
      run([IP, '-n', node, 'link', 'set', `vh${i}`, 'master', 'br0', 'up'], 'pod network');
      run([IP, '-n', pod.netns, 'addr', 'add', `${pod.ip}/24`, 'dev', 'eth0'], 'pod network');
      run([IP, '-n', pod.netns, 'link', 'set', 'eth0', 'up'], 'pod network');
      run([IP, '-n', pod.netns, 'link', 'set', 'lo', 'up'], 'pod network');
      run([IP, '-n', pod.netns, 'route', 'add', 'default', 'via', '10.244.0.1'], 'pod network');
    });
    const namespace = this.pods[0]?.namespace ?? 'default';
    const hosts = hostsFile(this.pods, services, namespace);
    const serviceIps = new Map(
      services.map((s) => [
        s.metadata.name,
        this.pods.find((p) => Object.entries(s.spec.selector ?? {}).every(([k, v]) => p.labels[k] === v))?.ip,
      ]),
    );
    const links = serviceLinks(services, serviceIps);

    this.agent = new ProbeAgent(node);
    const startPod = (pod) => {
      const dir = join(this.base, 'pods', pod.name);
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, 'hosts'), hosts);
      const volumes = this.materialise(pod, dir);
      for (const container of pod.containers) this.startContainer(pod, container, dir, volumes, links);
    };
    // Jobs first, to completion (Kubernetes starts everything at once; here the order is fixed so that
    // the check does not depend on which finishes first).
    const jobs = this.pods.filter((p) => p.workload.kind === 'Job');
    jobs.forEach(startPod);
    for (const entry of this.containers) {
      const until = Date.now() + JOB_MS;
      while (!entry.exited && Date.now() < until) await sleep(200);
      if (!entry.exited)
        throw new Error(
          `Job ${entry.pod.workload.metadata.name}: ${entry.pod.name}/${entry.container.name} did not finish within ${JOB_MS / 1000} s; its log:\n    ${this.logTail(entry)}`,
        );
      if (entry.exited.code !== 0)
        throw new Error(
          `Job ${entry.pod.workload.metadata.name}: ${entry.pod.name}/${entry.container.name} failed (${entry.exited.signal ?? `code ${entry.exited.code}`}); its log:\n    ${this.logTail(entry)}`,
        );
      entry.completed = true;
      this.log(`${entry.pod.name}/${entry.container.name} completed`);
    }
    this.pods.filter((p) => p.workload.kind !== 'Job').forEach(startPod);
  }

  netns(name) {
    run([IP, 'netns', 'add', name], 'network namespace');
    this.namespaces.push(name);
  }

  /** Volumes as host directories: ConfigMap/Secret files written out, emptyDirs, claims shared by name. */
  materialise(pod, dir) {
    const fsGroup = pod.spec.securityContext?.fsGroup;
    const out = new Map();
    for (const [name, volume] of podVolumes(pod.spec, pod, this.objects)) {
      let path;
      if (volume.files) {
        path = join(dir, 'volumes', name);
        mkdirSync(path, { recursive: true });
        for (const [file, content] of Object.entries(volume.files)) {
          mkdirSync(dirname(join(path, file)), { recursive: true });
          writeFileSync(join(path, file), content, { mode: volume.mode });
          if (fsGroup !== undefined) chownSync(join(path, file), 0, fsGroup);
        }
      } else if (volume.emptyDir) {
        path = join(dir, 'volumes', name);
        mkdirSync(path, { recursive: true });
        chmodSync(path, 0o777); // the kubelet makes emptyDirs world-writable
      } else {
        path = join(this.base, 'claims', volume.claim);
        mkdirSync(path, { recursive: true });
        // fsGroup: the kubelet gives the volume to the group, setgid, group-writable.
        if (fsGroup !== undefined) {
          chownSync(path, 0, fsGroup);
          chmodSync(path, 0o2775);
        }
      }
      out.set(name, { path, readOnly: volume.readOnly === true });
    }
    return out;
  }

  startContainer(pod, container, dir, volumes, links) {
    const image = this.images(container.image);
    if (image.skip) {
      this.containers.push({ pod, container, skipped: image.skip, exited: null });
      this.log(`not started ${pod.name}/${container.name}: ${image.skip}`);
      return;
    }
    const env = containerEnv({ container, pod, image, objects: this.objects, links });
    let argv = containerArgv(container, image, env);
    if (image.argv) argv = image.argv(argv);
    const { uid, gid, fsGroup } = runAs(container, pod.spec, image);
    const layer = join(dir, `layer-${container.name}`);
    const root = join(dir, `root-${container.name}`);
    mkdirSync(layer, { recursive: true });
    mkdirSync(root, { recursive: true });
    const lines = [
      'set -e',
      `/usr/bin/mount -t tmpfs tmpfs ${q(layer)}`,
      `/usr/bin/mkdir ${q(`${layer}/upper`)} ${q(`${layer}/work`)}`,
      `/usr/bin/mount -t overlay overlay -o lowerdir=/,upperdir=${layer}/upper,workdir=${layer}/work ${q(root)}`,
      `/usr/bin/mount -t proc proc ${q(`${root}/proc`)}`,
      `/usr/bin/mount --rbind /dev ${q(`${root}/dev`)}`,
      `/usr/bin/mount --rbind /sys ${q(`${root}/sys`)}`,
      `/usr/bin/cp ${q(join(dir, 'hosts'))} ${q(`${root}/etc/hosts`)}`,
      `echo ${q(pod.name)} > ${q(`${root}/etc/hostname`)}`,
      `/usr/bin/hostname ${q(pod.name)}`,
    ];
    if (image.tree) {
      lines.push(
        `/usr/bin/mkdir -p ${q(`${root}${image.workdir}`)}`,
        `/usr/bin/mount --bind ${q(image.tree)} ${q(`${root}${image.workdir}`)}`,
        `/usr/bin/mount -o remount,bind,ro ${q(`${root}${image.workdir}`)}`,
      );
    }
    for (const mount of container.volumeMounts ?? []) {
      const volume = volumes.get(mount.name);
      if (!volume)
        throw new Error(
          `${pod.name} container ${container.name}: volumeMount ${mount.name} names no volume of the pod`,
        );
      const source = mount.subPath ? join(volume.path, mount.subPath) : volume.path;
      const target = `${root}${inRoot(mount.mountPath)}`;
      lines.push(`/usr/bin/mkdir -p ${q(target)}`, `/usr/bin/mount --bind ${q(source)} ${q(target)}`);
      if (mount.readOnly || volume.readOnly) lines.push(`/usr/bin/mount -o remount,bind,ro ${q(target)}`);
    }
    if (container.securityContext?.readOnlyRootFilesystem) lines.push(`/usr/bin/mount -o remount,ro ${q(root)}`);
    const groups = fsGroup !== undefined ? `--groups=${fsGroup}` : '';
    lines.push(
      `exec /usr/sbin/chroot --userspec=${uid}:${gid} ${groups} ${q(root)} /bin/sh -c 'cd "$0" && exec "$@"' ${q(image.workdir ?? '/')} ${argv.map(q).join(' ')}`,
    );
    const script = join(dir, `start-${container.name}.sh`);
    writeFileSync(script, `${lines.join('\n')}\n`);
    const logFile = join(dir, `${container.name}.log`);
    const fd = openSync(logFile, 'w');
    const child = spawn(
      IP,
      [
        'netns',
        'exec',
        pod.netns,
        '/usr/bin/unshare',
        '--mount',
        '--uts',
        '--propagation',
        'private',
        '/bin/sh',
        script,
      ],
      { env, stdio: ['ignore', fd, fd] },
    );
    closeSync(fd);
    const entry = { pod, container, env, uid, gid, child, logFile, exited: null, stopping: false };
    child.on('exit', (code, signal) => {
      entry.exited = { code, signal };
    });
    this.containers.push(entry);
    this.log(`started ${pod.name}/${container.name} (${pod.ip}): ${argv.join(' ')}`);
  }

  logTail(entry, lines = 15) {
    try {
      return readFileSync(entry.logFile, 'utf8').trimEnd().split('\n').slice(-lines).join('\n    ');
    } catch {
      return '(no log)';
    }
  }

  /** Runs one probe (or handler) as written; resolves { ok, detail }. */
  async probe(entry, probe) {
    const timeoutMs = (probe.timeoutSeconds ?? 1) * 1000;
    if (probe.httpGet) {
      const port = resolvePort(probe.httpGet.port, entry.container);
      const host = probe.httpGet.host ?? entry.pod.ip;
      const headers = Object.fromEntries((probe.httpGet.httpHeaders ?? []).map((h) => [h.name, h.value]));
      const url = `${(probe.httpGet.scheme ?? 'HTTP').toLowerCase()}://${host}:${port}${probe.httpGet.path ?? '/'}`;
      const r = await this.agent.ask({ op: 'http', url, headers, timeoutMs });
      return {
        ok: r.status >= 200 && r.status < 400,
        detail: `GET ${url}: ${r.error ?? `${r.status} ${r.body.slice(0, 200)}`}`,
      };
    }
    if (probe.tcpSocket) {
      const port = resolvePort(probe.tcpSocket.port, entry.container);
      const r = await this.agent.ask({ op: 'tcp', host: probe.tcpSocket.host ?? entry.pod.ip, port, timeoutMs });
      return { ok: r.ok === true, detail: `tcp ${entry.pod.ip}:${port}: ${r.error ?? 'open'}` };
    }
    if (probe.exec) return this.exec(entry, probe.exec.command, timeoutMs);
    if (probe.sleep) {
      await sleep(probe.sleep.seconds * 1000);
      return { ok: true, detail: `slept ${probe.sleep.seconds} s` };
    }
    return { ok: false, detail: `unsupported probe ${Object.keys(probe).join(', ')}` };
  }

  /** A command inside the container: its namespaces, root, working directory, user and environment. */
  exec(entry, command, timeoutMs) {
    return new Promise((resolve) => {
      const child = spawn(
        '/usr/bin/nsenter',
        [
          '-t',
          String(entry.child.pid),
          '-m',
          '-n',
          '-u',
          '-r',
          '-w',
          '-S',
          String(entry.uid),
          '-G',
          String(entry.gid),
          '--',
          ...command,
        ],
        { env: entry.env, stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let out = '';
      child.stdout.on('data', (c) => (out += c));
      child.stderr.on('data', (c) => (out += c));
      const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      child.on('exit', (code, signal) => {
        clearTimeout(timer);
        resolve({
          ok: code === 0,
          detail: `exec ${command.join(' ')}: ${signal ? `killed (${signal}) after ${timeoutMs} ms` : `exit ${code}`} ${out.trim().slice(0, 200)}`,
        });
      });
    });
  }

  /**
   * The probes of one container, as a kubelet sequences them: the startupProbe until it passes (within
   * its failureThreshold × periodSeconds), then the readinessProbe until ready, then the livenessProbe,
   * which must not fail failureThreshold times in a row. Probes are retried every `pollMs` rather than
   * every periodSeconds, to keep the check short; `deadline` bounds everything.
   */
  async probeUntilReady(entry, deadline, pollMs = 500) {
    if (entry.skipped || entry.completed) return;
    const { container } = entry;
    const where = `${entry.pod.name}/${container.name}`;
    const phase = async (name, probe, budgetMs) => {
      const until = Math.min(deadline, Date.now() + budgetMs);
      let last = { ok: false, detail: 'not run' };
      while (Date.now() < until) {
        if (entry.exited) {
          entry.reported = true;
          throw new Error(
            `${where} exited (${entry.exited.signal ?? `code ${entry.exited.code}`}) during its ${name} probe; its log:\n    ${this.logTail(entry)}`,
          );
        }
        last = await this.probe(entry, probe);
        if (last.ok) return;
        await sleep(pollMs);
      }
      throw new Error(
        `${where}: ${name} probe did not pass within ${Math.round(budgetMs / 1000)} s (last: ${last.detail}); its log:\n    ${this.logTail(entry)}`,
      );
    };
    const declared = (p) => ((p.initialDelaySeconds ?? 0) + (p.periodSeconds ?? 10) * (p.failureThreshold ?? 3)) * 1000;
    if (container.startupProbe) await phase('startup', container.startupProbe, declared(container.startupProbe));
    if (container.readinessProbe) await phase('readiness', container.readinessProbe, deadline - Date.now());
    if (container.livenessProbe) {
      let failures = 0;
      for (;;) {
        const r = await this.probe(entry, container.livenessProbe);
        if (r.ok) break;
        if (++failures >= (container.livenessProbe.failureThreshold ?? 3))
          throw new Error(
            `${where}: liveness probe failed ${failures} times (${r.detail}); the kubelet would restart it`,
          );
        await sleep(pollMs);
      }
    }
  }

  /**
   * Stops containers as a kubelet deletes a pod: the preStop hook, then SIGTERM, then SIGKILL after
   * terminationGracePeriodSeconds (capped at `capMs` here). Resolves each container's exit.
   */
  async stop(entries, capMs) {
    return Promise.all(
      entries
        .filter((e) => !e.skipped && !e.completed)
        .map(async (entry) => {
          if (entry.exited) return { entry, early: true, ...entry.exited };
          entry.stopping = true;
          const graceMs = Math.min(capMs, (entry.pod.spec.terminationGracePeriodSeconds ?? 30) * 1000);
          const started = Date.now();
          const preStop = entry.container.lifecycle?.preStop;
          let hook = null;
          if (preStop) hook = await this.probe(entry, { ...preStop, timeoutSeconds: graceMs / 1000 });
          if (!entry.exited) entry.child.kill('SIGTERM');
          while (!entry.exited && Date.now() - started < graceMs) await sleep(100);
          const killed = !entry.exited;
          if (killed) entry.child.kill('SIGKILL');
          while (!entry.exited) await sleep(50);
          return { entry, hook, killed, ms: Date.now() - started, ...entry.exited };
        }),
    );
  }

  /** Best effort, synchronous (also on process exit): kill what runs, delete the namespaces and files. */
  destroySync() {
    for (const entry of this.containers)
      if (entry.child && !entry.exited)
        try {
          process.kill(entry.child.pid, 'SIGKILL');
        } catch {
          /* gone */
        }
    this.agent?.close();
    for (const name of this.namespaces.splice(0)) spawnSync(IP, ['netns', 'del', name]);
    rmSync(this.base, { recursive: true, force: true });
    process.off('exit', this.cleanup);
    process.off('SIGINT', this.interrupted);
    process.off('SIGTERM', this.interrupted);
  }
}

/** The long-lived probe process in the node's network namespace. */
class ProbeAgent {
  constructor(netns) {
    const script = fileURLToPath(new URL('./probe-agent.mjs', import.meta.url));
    this.child = spawn(IP, ['netns', 'exec', netns, process.execPath, script], { stdio: ['pipe', 'pipe', 'inherit'] });
    this.waiting = new Map();
    this.next = 0;
    createInterface({ input: this.child.stdout }).on('line', (line) => {
      const answer = JSON.parse(line);
      this.waiting.get(answer.id)?.(answer);
      this.waiting.delete(answer.id);
    });
  }

  ask(request) {
    const id = this.next++;
    return new Promise((resolve) => {
      this.waiting.set(id, resolve);
      this.child.stdin.write(`${JSON.stringify({ id, ...request })}\n`);
    });
  }

  close() {
    this.child.stdin.end();
    this.child.kill('SIGKILL');
  }
}
