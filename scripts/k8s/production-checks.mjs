// Assertions on rendered objects for what a production install needs (docs/deployment.md, "Ready for
// production"): each names the object and what is wrong. `problem(where, message)` collects them.
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { quantity } from './pod-plan.mjs';

const byKind = (objects, kind) => objects.filter((o) => o.kind === kind);
const named = (objects, kind, name) => objects.find((o) => o.kind === kind && o.metadata.name === name);
const podSpec = (o) => o.spec.template.spec;
const matches = (selector, labels) =>
  Object.entries(selector?.matchLabels ?? {}).every(([k, v]) => labels?.[k] === v) &&
  (selector?.matchExpressions ?? []).every((e) =>
    e.operator === 'In' ? e.values.includes(labels?.[e.key]) : e.operator === 'Exists' ? e.key in (labels ?? {}) : true,
  );
const bytes = (q) => Number(quantity(q, '1'));
/** nats.conf sizes (8Gi, 256MB, plain numbers) in bytes. */
const natsSize = (v) => {
  const m = String(v).match(/^(\d+)\s*(K|M|G|T|Ki|Mi|Gi|Ti|KB|MB|GB|TB)?$/i);
  if (!m) return NaN;
  const unit = (m[2] ?? '').toUpperCase().replace('B', '').replace('I', '');
  return Number(m[1]) * ({ '': 1, K: 1024, M: 1024 ** 2, G: 1024 ** 3, T: 1024 ** 4 }[unit] ?? NaN);
};

/** The cortex config each pod reads: the ConfigMap mounted where CORTEX_CONFIG points. */
function cortexConfigOf(objects, spec) {
  const container = spec.containers[0];
  const path = container.env?.find((e) => e.name === 'CORTEX_CONFIG')?.value;
  if (!path) return null;
  const mount = container.volumeMounts?.find((m) => path.startsWith(`${m.mountPath}/`));
  const volume = spec.volumes?.find((v) => v.name === mount?.name);
  const map = volume?.configMap && named(objects, 'ConfigMap', volume.configMap.name);
  const text = map?.data?.[path.slice(mount.mountPath.length + 1)];
  return text === undefined ? null : { map, config: parseYaml(text) ?? {} };
}

/** `singleNode`: the single-node component, whose models claim is ReadWriteOnce by design. */
export function checkProduction(objects, label, problem, { singleNode = false } = {}) {
  const at = (o) => `${label}: ${o.kind}/${o.metadata.name}`;
  const workloads = [...byKind(objects, 'Deployment'), ...byKind(objects, 'StatefulSet'), ...byKind(objects, 'Job')];
  const cortex = workloads.filter((w) =>
    podSpec(w).containers.some((c) => /^cortex(-worker-cuda)?(:|@|$)/.test(c.image)),
  );

  // The blocker: the gateway's API keys from a rendered Secret.
  const gateway = named(objects, 'Deployment', 'gateway');
  for (const key of ['CORTEX_API_KEYS', 'CORTEX_ADMIN_KEYS']) {
    const ref = podSpec(gateway).containers[0].env?.find((e) => e.name === key)?.valueFrom?.secretKeyRef;
    const secret = ref && named(objects, 'Secret', ref.name);
    if (!secret?.data?.[ref.key])
      problem(at(gateway), `${key} must come from a rendered Secret's key (the gateway exits at start without keys)`);
  }

  // Drain: grace = preStop pause + drain_timeout_ms + the exit margin (5 s), for every cortex pod.
  const configs = new Map();
  for (const w of cortex) {
    const found = cortexConfigOf(objects, podSpec(w));
    if (!found) {
      problem(at(w), 'mounts no cortex config at CORTEX_CONFIG');
      continue;
    }
    configs.set(w.metadata.name, found);
    const drain = found.config.drain_timeout_ms ?? 10_000;
    if (drain < 60_000)
      problem(at(w), `drain_timeout_ms is ${drain}: streams and generations need a minute or more to end on a rollout`);
    const sleep =
      podSpec(w)
        .containers[0].lifecycle?.preStop?.exec?.command?.join(' ')
        .match(/^sleep (\d+)$/)?.[1] ??
      podSpec(w).containers[0].lifecycle?.preStop?.sleep?.seconds ??
      0;
    const needed = Number(sleep) + Math.ceil((drain + 5_000) / 1000);
    const grace = podSpec(w).terminationGracePeriodSeconds ?? 30;
    if (w.kind !== 'Job' && grace < needed)
      problem(
        at(w),
        `terminationGracePeriodSeconds ${grace} < preStop ${sleep} s + drain_timeout_ms ${drain / 1000} s + 5 s = ${needed} s: the kubelet kills it mid-drain`,
      );
  }

  // Workers on their own config: no catalogue (an edit must not roll them), the same bus and drain.
  const worker = named(objects, 'Deployment', 'worker');
  const workerConfig = configs.get('worker');
  const mainConfig = configs.get('gateway');
  if (workerConfig && mainConfig) {
    if (workerConfig.map.metadata.name === mainConfig.map.metadata.name)
      problem(at(worker), 'mounts the same ConfigMap as the gateway: a catalogue edit rolls every worker');
    if (workerConfig.config.models !== undefined)
      problem(
        at(worker),
        `its ConfigMap ${workerConfig.map.metadata.name} holds a catalogue (models), which workers do not read`,
      );
    for (const key of ['nats', 'metrics', 'drain_timeout_ms']) {
      if (JSON.stringify(workerConfig.config[key]) !== JSON.stringify(mainConfig.config[key]))
        problem(at(worker), `its config's ${key} differs from ${mainConfig.map.metadata.name}'s`);
    }
  }

  // Readiness: available only after a pinned load could have happened; a rollout that stalls says so.
  const startup = podSpec(worker).containers[0].startupProbe;
  const startupS = startup
    ? (startup.initialDelaySeconds ?? 0) + (startup.periodSeconds ?? 10) * (startup.failureThreshold ?? 3)
    : 0;
  if ((worker.spec.minReadySeconds ?? 0) < 60)
    problem(
      at(worker),
      `minReadySeconds ${worker.spec.minReadySeconds ?? 0}: a worker counts as available before routers loaded its pinned models, so a rollout empties the fleet`,
    );
  if ((worker.spec.progressDeadlineSeconds ?? 600) < startupS + (worker.spec.minReadySeconds ?? 0) + 120)
    problem(
      at(worker),
      `progressDeadlineSeconds ${worker.spec.progressDeadlineSeconds ?? 600} is shorter than the startup probe (${startupS} s) + minReadySeconds + a load`,
    );
  for (const w of workloads.filter((x) => x.kind !== 'Job'))
    for (const c of podSpec(w).containers)
      if (!c.startupProbe) problem(`${at(w)} container ${c.name}`, 'needs a startupProbe');

  // Models: a ReadWriteMany claim, filled by a pull Job (HF_TOKEN slot), read-only in workers.
  const modelsVolume = podSpec(worker).volumes.find(
    (v) =>
      v.name ===
      podSpec(worker).containers[0].volumeMounts.find((m) => m.mountPath === workerConfig?.config.worker?.models_dir)
        ?.name,
  );
  const claim =
    modelsVolume?.persistentVolumeClaim &&
    named(objects, 'PersistentVolumeClaim', modelsVolume.persistentVolumeClaim.claimName);
  if (!claim)
    problem(at(worker), `models_dir ${workerConfig?.config.worker?.models_dir} is not a PersistentVolumeClaim's mount`);
  else {
    const mode = singleNode ? 'ReadWriteOnce' : 'ReadWriteMany';
    if (!claim.spec.accessModes.includes(mode))
      problem(
        at(claim),
        singleNode
          ? 'single-node: ReadWriteOnce, which every StorageClass offers'
          : 'needs ReadWriteMany: every worker mounts it',
      );
    const mount = podSpec(worker).containers[0].volumeMounts.find((m) => m.name === modelsVolume.name);
    if (!mount.readOnly && !modelsVolume.persistentVolumeClaim.readOnly)
      problem(at(worker), 'mounts the models volume writable; the pull Job fills it');
    const pull = byKind(objects, 'Job').find((j) =>
      podSpec(j).volumes?.some((v) => v.persistentVolumeClaim?.claimName === claim.metadata.name),
    );
    if (!pull) problem(at(claim), 'no Job fills it');
    else {
      const c = podSpec(pull).containers[0];
      if (JSON.stringify(c.args) !== '["pull"]') problem(at(pull), 'must run `cortex pull`');
      const token = c.env?.find((e) => e.name === 'HF_TOKEN')?.valueFrom?.secretKeyRef;
      if (!token?.optional) problem(at(pull), 'needs HF_TOKEN from an optional Secret key (gated models)');
      const pullDir = configs.get(pull.metadata.name)?.config.worker?.models_dir;
      if (
        pullDir !== workerConfig?.config.worker?.models_dir ||
        !c.volumeMounts.some((m) => m.mountPath === pullDir && !m.readOnly)
      )
        problem(
          at(pull),
          `must write the models volume at the workers' models_dir (${workerConfig?.config.worker?.models_dir}), not ${pullDir}`,
        );
    }
  }

  // Memory request = limit and a PriorityClass, for GPU workers and NATS.
  const nats = named(objects, 'StatefulSet', 'nats');
  for (const w of [worker, nats]) {
    const r = podSpec(w).containers[0].resources;
    if (
      w === worker &&
      String(podSpec(w).containers[0].image).includes('worker-cuda') &&
      r.requests.memory !== r.limits.memory
    )
      problem(
        at(w),
        `memory request ${r.requests.memory} ≠ limit ${r.limits.memory}: the first eviction candidate under memory pressure`,
      );
    if (!named(objects, 'PriorityClass', podSpec(w).priorityClassName))
      problem(at(w), `needs a rendered PriorityClass (priorityClassName ${podSpec(w).priorityClassName})`);
  }

  // NATS: TLS for clients and routes, routes verified, clients trusting the CA; spread over nodes.
  const natsConf = named(objects, 'ConfigMap', 'nats-config')?.data?.['nats.conf'] ?? '';
  const cluster = natsConf.slice(natsConf.indexOf('cluster {'));
  const top = natsConf.slice(0, natsConf.indexOf('cluster {'));
  if (!/\btls\s*\{[^}]*cert_file/.test(top)) problem(at(nats), 'nats.conf has no tls block for clients');
  if (!/\btls\s*\{[^}]*verify:\s*true/.test(cluster))
    problem(at(nats), 'nats.conf cluster routes need tls with verify: true (any pod could join as a route)');
  for (const [name, { config }] of configs) {
    if (name === 'models-pull') continue; // reads the catalogue, never connects
    if (
      !String(config.nats?.url ?? '')
        .split(',')
        .every((u) => u.startsWith('tls://'))
    )
      problem(`${label}: ${name}`, `nats.url ${config.nats?.url} is not TLS`);
    const ca = config.nats?.tls?.ca_file;
    const w = workloads.find((x) => x.metadata.name === name);
    if (!ca || !podSpec(w).containers[0].volumeMounts.some((m) => ca.startsWith(`${m.mountPath}/`)))
      problem(`${label}: ${name}`, `nats.tls.ca_file ${ca} is not mounted`);
  }
  const spread = podSpec(nats).topologySpreadConstraints?.some(
    (t) => t.topologyKey === 'kubernetes.io/hostname' && t.whenUnsatisfiable === 'DoNotSchedule' && t.maxSkew === 1,
  );
  const required = podSpec(nats).affinity?.podAntiAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.some(
    (t) => t.topologyKey === 'kubernetes.io/hostname',
  );
  if (!spread && !required)
    problem(
      at(nats),
      'needs a DoNotSchedule topology spread (maxSkew 1) or required anti-affinity on kubernetes.io/hostname',
    );

  // JetStream sized and watched: the store below the volume, the Responses stores below the store, an exporter.
  const maxFile = natsSize(natsConf.match(/max_file_store:\s*(\S+)/)?.[1]);
  const pvc = nats.spec.volumeClaimTemplates?.find((t) =>
    podSpec(nats).containers[0].volumeMounts.some(
      (m) => m.name === t.metadata.name && natsConf.includes(`store_dir: ${m.mountPath}`),
    ),
  );
  if (!(maxFile > 0)) problem(at(nats), 'nats.conf has no jetstream max_file_store');
  else if (!pvc || bytes(pvc.spec.resources.requests.storage) <= maxFile)
    problem(
      at(nats),
      `max_file_store must be below the JetStream volume's size (${pvc?.spec.resources.requests.storage})`,
    );
  const stores = mainConfig?.config.responses?.max_bytes ?? 0;
  if (!(stores > 0) || 2 * stores > 0.75 * maxFile)
    problem(
      `${label}: ${mainConfig?.map.metadata.name}`,
      `responses.max_bytes ${stores}: the two Responses stores must be capped well below max_file_store (${maxFile})`,
    );
  // -prefix=nats: the exporter's own default names them gnatsd_*, which the alert rules do not query.
  if (
    !podSpec(nats).containers.some(
      (c) =>
        c.image.includes('prometheus-nats-exporter') &&
        c.args?.some((a) => a.startsWith('-jsz')) &&
        c.args?.includes('-prefix=nats'),
    )
  )
    problem(
      at(nats),
      'needs a prometheus-nats-exporter sidecar with -jsz and -prefix=nats (the alert rules query nats_varz_*)',
    );

  // Network: default deny both ways, a way in for every Service port, routes only between NATS servers.
  const policies = byKind(objects, 'NetworkPolicy');
  if (
    !policies.some(
      (p) =>
        Object.keys(p.spec.podSelector ?? {}).length === 0 &&
        p.spec.policyTypes?.includes('Ingress') &&
        p.spec.policyTypes?.includes('Egress') &&
        !p.spec.ingress &&
        !p.spec.egress,
    )
  )
    problem(label, 'needs a default-deny NetworkPolicy (all pods, Ingress and Egress, no rules)');
  const podsOf = (service) =>
    workloads.filter((w) => matches({ matchLabels: service.spec.selector }, w.spec.template.metadata.labels));
  const allows = (direction, labels, port, peer) =>
    policies.some(
      (p) =>
        matches(p.spec.podSelector, labels) &&
        (p.spec[direction] ?? []).some(
          (rule) =>
            (rule.ports ?? [{ port }]).some((x) => x.port === port) &&
            (peer === undefined ||
              (rule[direction === 'ingress' ? 'from' : 'to'] ?? []).some(
                (f) => !f.namespaceSelector && matches(f.podSelector, peer),
              )),
        ),
    );
  for (const service of byKind(objects, 'Service')) {
    for (const w of podsOf(service)) {
      for (const port of service.spec.ports) {
        const target =
          typeof port.targetPort === 'string'
            ? podSpec(w)
                .containers.flatMap((c) => c.ports ?? [])
                .find((p) => p.name === port.targetPort)?.containerPort
            : (port.targetPort ?? port.port);
        if (!allows('ingress', w.spec.template.metadata.labels, target))
          problem(
            `${label}: Service/${service.metadata.name}`,
            `no NetworkPolicy lets traffic in to ${w.metadata.name} on ${target} (${port.name})`,
          );
      }
    }
  }
  const natsLabels = nats.spec.template.metadata.labels;
  const routeRules = policies
    .flatMap((p) => (matches(p.spec.podSelector, natsLabels) ? (p.spec.ingress ?? []) : []))
    .filter((r) => (r.ports ?? [{ port: 6222 }]).some((x) => x.port === 6222));
  const others = workloads.filter((w) => w !== nats).map((w) => w.spec.template.metadata.labels);
  const onlyNats = (f) =>
    !f.namespaceSelector &&
    !f.ipBlock &&
    matches(f.podSelector, natsLabels) &&
    !others.some((labels) => matches(f.podSelector, labels));
  if (routeRules.length === 0 || routeRules.some((r) => !r.from || !r.from.every(onlyNats)))
    problem(at(nats), 'port 6222 (routes) must be open only to NATS pods');
  for (const w of cortex.filter((x) => x.kind !== 'Job')) {
    if (!allows('egress', w.spec.template.metadata.labels, 4222, natsLabels))
      problem(at(w), 'no NetworkPolicy lets it reach NATS on 4222');
  }

  // The namespace is not part of the kustomization (`kubectl delete -k` must not delete stored responses).
  for (const ns of byKind(objects, 'Namespace'))
    problem(at(ns), 'is rendered: `kubectl delete -k k8s/` would delete it with every PVC in it');

  // Exposure examples: body size and timeouts above cortex's own limits.
  const bodyLimit = mainConfig?.config.gateway?.body_limit_bytes ?? 8 * 1024 * 1024;
  const longest = Math.max(
    (mainConfig?.config.gateway?.placement_timeout_ms ?? 120_000) / 1000,
    (mainConfig?.config.responses?.websocket_connection_limit_ms ?? 3_600_000) / 1000,
  );
  for (const ingress of byKind(objects, 'Ingress')) {
    const a = ingress.metadata.annotations ?? {};
    const body = a['nginx.ingress.kubernetes.io/proxy-body-size'];
    if (!body || natsSize(body.replace(/m$/i, 'Mi').replace(/k$/i, 'Ki').replace(/g$/i, 'Gi')) < bodyLimit)
      problem(at(ingress), `proxy-body-size ${body} is below gateway.body_limit_bytes (${bodyLimit})`);
    for (const key of ['proxy-read-timeout', 'proxy-send-timeout'])
      if (!(Number(a[`nginx.ingress.kubernetes.io/${key}`]) >= longest))
        problem(at(ingress), `${key} must be at least ${longest} s`);
    if (a['nginx.ingress.kubernetes.io/proxy-buffering'] !== 'off')
      problem(at(ingress), 'proxy-buffering must be off (SSE)');
  }
  const seconds = (d) => Number(String(d).match(/^(\d+)s$/)?.[1] ?? NaN);
  for (const route of byKind(objects, 'HTTPRoute')) {
    for (const rule of route.spec.rules)
      for (const key of ['request', 'backendRequest'])
        if (!(seconds(rule.timeouts?.[key]) >= longest))
          problem(at(route), `timeouts.${key} must be at least ${longest}s`);
  }
}

/** With the monitoring component: alerts on a filling JetStream store, and only documented cortex metrics. */
export function checkMonitoring(objects, label, problem) {
  const rules = byKind(objects, 'PrometheusRule').flatMap((r) => r.spec.groups.flatMap((g) => g.rules));
  if (!rules.some((r) => /nats_varz_jetstream_stats_storage/.test(r.expr)))
    problem(label, 'no alert rule on the JetStream store filling up');
  const documented = readFileSync('docs/metrics.md', 'utf8');
  for (const r of rules)
    for (const metric of String(r.expr).match(/cortex_[a-z_]+/g) ?? [])
      if (!documented.includes(`\`${metric}\``))
        problem(label, `alert ${r.alert} uses ${metric}, which docs/metrics.md does not list`);
  const dashboard = named(objects, 'ConfigMap', 'cortex-dashboard')?.data?.['cortex-dashboard.json'];
  if (dashboard !== readFileSync('deploy/grafana/cortex-dashboard.json', 'utf8'))
    problem(
      label,
      'the dashboard ConfigMap differs from deploy/grafana/cortex-dashboard.json (copy it to k8s/monitoring/)',
    );
}

/** The CUDA base image's minimum driver, as docs/deployment.md states it. */
const CUDA_MIN_DRIVER = {
  '12.0': 525,
  12.1: 530,
  12.2: 535,
  12.3: 545,
  12.4: 550,
  12.5: 555,
  12.6: 560,
  12.8: 570,
  12.9: 575,
  '13.0': 580,
};
export function checkCudaDocs(problem) {
  const image = readFileSync('Dockerfile', 'utf8').match(/ARG CUDA_IMAGE=nvidia\/cuda:(\d+\.\d+)/)?.[1];
  const needed = CUDA_MIN_DRIVER[image];
  if (!needed)
    return problem(
      'Dockerfile',
      `CUDA_IMAGE ${image}: unknown minimum driver (add it to CUDA_MIN_DRIVER in scripts/k8s/production-checks.mjs)`,
    );
  const docs = readFileSync('docs/deployment.md', 'utf8');
  const stated = [...docs.matchAll(/NVIDIA driver of version (\d+) or newer/g)].map((m) => Number(m[1]));
  if (stated.length === 0 || stated.some((d) => d !== needed))
    problem(
      'docs/deployment.md',
      `the CUDA ${image} image needs an NVIDIA driver ${needed} or newer; the docs say ${stated.join(', ') || 'nothing'} ("NVIDIA driver of version N or newer")`,
    );
}
