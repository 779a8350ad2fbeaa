// The part of `npm run test:k8s` that starts what was rendered: every Deployment and StatefulSet of a
// rendering runs here as Kubernetes would run it (scripts/k8s/sandbox.mjs), its probes are run as
// written, and a chat request goes through the gateway Service to a worker over NATS. Returns the
// problems found; each names the pod and shows its log.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { dockerfileStage, resolvePort } from './pod-plan.mjs';
import { Sandbox, sandboxSupport } from './sandbox.mjs';

/** How long every container together may take to become ready, and the chat request to answer. */
const READY_MS = 100_000;
const REQUEST_MS = 60_000;

/**
 * How each image the manifests name starts. cortex's images run `node apps/cli/dist/main.js` from their
 * WORKDIR /app holding the built apps: their stages are read from the Dockerfile, and this repository
 * (built) is their /app. The official NATS image's entrypoint runs `nats-server` with the args when the
 * first one starts with `-`; here that is Debian's nats-server.
 */
function imageTable(repoRoot) {
  const dockerfile = readFileSync(join(repoRoot, 'Dockerfile'), 'utf8');
  const cortex = { ...dockerfileStage(dockerfile, 'runtime'), tree: repoRoot };
  const cuda = { ...dockerfileStage(dockerfile, 'worker-cuda'), tree: repoRoot };
  const nats = {
    entrypoint: ['docker-entrypoint.sh'],
    cmd: ['nats-server', '--config', '/etc/nats/nats-server.conf'],
    env: {},
    workdir: '/',
    user: '0:0',
    argv: (argv) => (argv[1]?.startsWith('-') ? ['nats-server', ...argv.slice(1)] : argv.slice(1)),
  };
  return (ref) => {
    const repo = String(ref).replace(/[:@].*$/, '');
    if (repo === 'cortex') return cortex;
    if (repo === 'cortex-worker-cuda') return cuda;
    if (repo === 'nats') return nats;
    // No binary of it on this machine, and no registry to pull the image from.
    if (repo === 'natsio/prometheus-nats-exporter') return { skip: `no ${repo} binary here (its probes are not run)` };
    throw new Error(`image ${ref}: this check does not know how it starts`);
  };
}

export async function startCheck(objects, { repoRoot, label, log }) {
  const problems = [];
  const problem = (message) => problems.push(`${label}: ${message}`);
  if (process.env.CORTEX_K8S_START === 'skip') {
    log(`${label}: SKIPPED starting the pods (CORTEX_K8S_START=skip): the blocker class is not checked`);
    return problems;
  }
  const unsupported = sandboxSupport();
  // A developer's `npm test` without root (or off Linux) goes on without this part and says so loudly;
  // in CI (CI=true) the check must run, so there it fails.
  if (unsupported && !process.env.CI) {
    log(
      `${label}: SKIPPED starting the pods: this check ${unsupported}; the blocker class is not checked here (run as root on Linux, as CI does)`,
    );
    return problems;
  }
  if (unsupported) {
    problem(`cannot start the pods here: this check ${unsupported} (CORTEX_K8S_START=skip skips it, and says so)`);
    return problems;
  }

  const workloads = objects.filter((o) => o.kind === 'Deployment' || o.kind === 'StatefulSet' || o.kind === 'Job');
  const sandbox = new Sandbox({ objects, images: imageTable(repoRoot), log });
  const started = Date.now();
  try {
    await sandbox.start(workloads);
    const deadline = Date.now() + READY_MS;
    const results = await Promise.allSettled(
      sandbox.containers.map((entry) => sandbox.probeUntilReady(entry, deadline)),
    );
    for (const r of results) if (r.status === 'rejected') problem(r.reason.message);
    const running = sandbox.containers.filter((e) => !e.skipped && !e.completed);
    log(
      `${label}: ${running.length - problems.length} of ${running.length} containers started, passed their probes and are ready (${Math.round((Date.now() - started) / 1000)} s)`,
    );

    if (problems.length === 0) await firstRequest(sandbox, objects, problem, log, label);

    // Stop as a kubelet would (preStop, SIGTERM, grace): cortex first, then NATS, which its clients need
    // to drain. Capped here; a container still running at the cap is killed and reported.
    const isNats = (e) => e.pod.workload.metadata.name === 'nats';
    // (stop() leaves out containers that were not started here and Jobs' completed ones.)
    const stops = [
      ...(await sandbox.stop(
        sandbox.containers.filter((e) => !isNats(e)),
        30_000,
      )),
      ...(await sandbox.stop(sandbox.containers.filter(isNats), 45_000)),
    ];
    for (const s of stops) {
      const where = `${s.entry.pod.name}/${s.entry.container.name}`;
      if (s.early && s.entry.reported) continue;
      if (s.early)
        problem(
          `${where} exited on its own (${s.signal ?? `code ${s.code}`}) before it was stopped; its log:\n    ${sandbox.logTail(s.entry)}`,
        );
      else if (s.hook && !s.hook.ok) problem(`${where}: preStop hook failed: ${s.hook.detail}`);
      else if (s.killed)
        problem(`${where} did not exit within ${Math.round(s.ms / 1000)} s of its preStop hook and SIGTERM while idle`);
      // cortex drains and exits 0 on SIGTERM; nats-server exits 1 when SIGTERM ends its lame duck mode,
      // as the kubelet's SIGTERM right after the preStop hook does: it only has to exit in time.
      else if (s.code !== 0 && !/^nats(:|$)/.test(s.entry.container.image))
        problem(
          `${where} exited with ${s.signal ?? `code ${s.code}`} after SIGTERM; its log:\n    ${sandbox.logTail(s.entry)}`,
        );
    }
    log(
      `${label}: every container stopped (preStop, SIGTERM) ${problems.length === 0 ? 'in time, every cortex one with exit code 0' : 'with problems'}; ${Math.round((Date.now() - started) / 1000)} s in all`,
    );
  } catch (error) {
    problem(error.message);
  } finally {
    sandbox.destroySync();
  }
  return problems;
}

/**
 * A chat completion through the `gateway` Service, as a client in the cluster sends it: the Service's
 * port and targetPort to a gateway pod, the API key from the rendered Secret, the pinned model of the
 * rendered catalogue. Without a key it must be refused (the keys are in force), with one it must answer.
 */
async function firstRequest(sandbox, objects, problem, log, label) {
  const service = objects.find((o) => o.kind === 'Service' && o.metadata.name === 'gateway');
  const entry = sandbox.containers.find((e) =>
    Object.entries(service?.spec.selector ?? {}).every(([k, v]) => e.pod.labels[k] === v),
  );
  if (!service || !entry) return problem('no Service gateway selecting a gateway pod');
  const port = service.spec.ports[0];
  const target = resolvePort(port.targetPort ?? port.port, entry.container);
  const url = `http://${entry.pod.ip}:${target}/v1/chat/completions`;
  const keyRef = entry.container.env.find((e) => e.name === 'CORTEX_API_KEYS')?.valueFrom?.secretKeyRef;
  const key =
    keyRef &&
    Buffer.from(
      objects.find((o) => o.kind === 'Secret' && o.metadata.name === keyRef.name)?.data?.[keyRef.key] ?? '',
      'base64',
    )
      .toString()
      .split(',')[0];
  const config = objects.find(
    (o) => o.kind === 'ConfigMap' && parseYaml(o.data?.['cortex.yaml'] ?? '{}')?.models?.length,
  );
  const model = parseYaml(config.data['cortex.yaml']).models.find((m) => m.pinned)?.id;
  const body = JSON.stringify({ model, messages: [{ role: 'user', content: 'Say hello.' }], max_tokens: 8 });
  const headers = { 'content-type': 'application/json' };

  const anonymous = await sandbox.agent.ask({ op: 'http', url, method: 'POST', headers, body, timeoutMs: REQUEST_MS });
  if (anonymous.status !== 401)
    problem(`POST ${url} without an API key answered ${anonymous.error ?? anonymous.status}, not 401`);
  if (!key) return problem('the gateway container has no CORTEX_API_KEYS from a Secret');
  const r = await sandbox.agent.ask({
    op: 'http',
    url,
    method: 'POST',
    headers: { ...headers, authorization: `Bearer ${key}` },
    body,
    timeoutMs: REQUEST_MS,
  });
  let content;
  try {
    content = JSON.parse(r.body).choices?.[0]?.message?.content;
  } catch {
    content = undefined;
  }
  if (r.status !== 200 || typeof content !== 'string' || content.length === 0)
    return problem(`POST ${url} (model ${model}) answered ${r.error ?? `${r.status} ${r.body}`}`);
  log(
    `${label}: POST /v1/chat/completions via Service gateway:${port.port} → ${entry.pod.name} → NATS → worker: 200, ${model} said ${JSON.stringify(content)}`,
  );
}
