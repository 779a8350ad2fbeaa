// Pure: from rendered Kubernetes objects to what a kubelet and a container runtime would do for each
// pod — the process (image entrypoint and cmd overridden by command and args), its environment (image
// ENV, then the container's env in order with $(VAR) expansion, secretKeyRef, configMapKeyRef,
// fieldRef, resourceFieldRef, envFrom, and the service links Kubernetes injects), its volumes (the
// files of ConfigMap and Secret volumes, emptyDirs, claims) and its probes and preStop hook. No I/O:
// scripts/k8s/sandbox.mjs runs the plans. Covered by pod-plan.spec.mjs.

/** The parts of a Dockerfile stage that decide how its container starts. */
export function dockerfileStage(text, stage) {
  const lines = text
    .replace(/\\\r?\n/g, ' ')
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'));
  const stages = new Map();
  let current = null;
  for (const line of lines) {
    const [instruction, ...rest] = line.split(/\s+/);
    const value = rest.join(' ');
    const op = instruction.toUpperCase();
    if (op === 'FROM') {
      const [base, as, name] = rest;
      const parent = stages.get(base);
      current = parent
        ? { ...parent, env: { ...parent.env }, name }
        : { entrypoint: [], cmd: [], env: {}, workdir: '/', user: null, name };
      if (as?.toUpperCase() === 'AS' && name) stages.set(name, current);
      stages.set('__last', current);
      continue;
    }
    if (!current) continue;
    if (op === 'ENTRYPOINT') current.entrypoint = JSON.parse(value);
    if (op === 'CMD') current.cmd = JSON.parse(value);
    if (op === 'WORKDIR') current.workdir = value;
    if (op === 'USER') current.user = value;
    if (op === 'ENV')
      for (const [, key, raw] of value.matchAll(/([A-Za-z_][A-Za-z0-9_]*)=("[^"]*"|\S+)/g))
        current.env[key] = raw.replace(/^"(.*)"$/, '$1');
  }
  const found = stage ? stages.get(stage) : stages.get('__last');
  if (!found) throw new Error(`the Dockerfile has no stage ${stage}`);
  return found;
}

/** A container runtime's defaults (Docker, containerd) before the image's own ENV. */
const RUNTIME_ENV = { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' };

/** Kubernetes' $(VAR) expansion: earlier variables of the same list only; $$ escapes; unknown ones stay. */
export function expand(value, env) {
  return value.replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (whole, name) =>
    whole === '$$' ? '$' : name in env ? env[name] : whole,
  );
}

const decode = (secret, key) => Buffer.from(secret.data?.[key] ?? '', 'base64').toString('utf8');

/** The value of one data key of a ConfigMap or Secret, as a pod would see it. */
function keyOf(objects, kind, ref, where) {
  const object = objects.find((o) => o.kind === kind && o.metadata.name === ref.name);
  if (!object) {
    if (ref.optional) return undefined;
    throw new Error(`${where}: ${kind} ${ref.name} is not rendered (the pod would stay in CreateContainerConfigError)`);
  }
  const has =
    kind === 'Secret'
      ? ref.key in (object.data ?? {}) || ref.key in (object.stringData ?? {})
      : ref.key in (object.data ?? {});
  if (!has) {
    if (ref.optional) return undefined;
    throw new Error(
      `${where}: ${kind} ${ref.name} has no key ${ref.key} (the pod would stay in CreateContainerConfigError)`,
    );
  }
  return kind === 'Secret' ? (object.stringData?.[ref.key] ?? decode(object, ref.key)) : object.data[ref.key];
}

/** CPU or memory quantities in the unit of `divisor`, rounded up as the downward API does. */
export function quantity(value, divisor = '1') {
  const parse = (q) => {
    const m = String(q).match(/^([0-9.]+)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$/);
    if (!m) throw new Error(`not a quantity: ${q}`);
    const scale =
      { m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, Ti: 1024 ** 4 }[m[2]] ?? 1;
    return Number(m[1]) * scale;
  };
  return String(Math.ceil(parse(value) / parse(divisor)));
}

/** Docker-style service links that Kubernetes injects (enableServiceLinks defaults to true). */
export function serviceLinks(services, ips) {
  const env = {};
  for (const service of services) {
    if (service.spec.clusterIP === 'None') continue;
    const ip = ips.get(service.metadata.name) ?? '0.0.0.0';
    const prefix = service.metadata.name.toUpperCase().replace(/-/g, '_');
    const [first] = service.spec.ports ?? [];
    if (!first) continue;
    env[`${prefix}_SERVICE_HOST`] = ip;
    env[`${prefix}_SERVICE_PORT`] = String(first.port);
    env[`${prefix}_PORT`] = `tcp://${ip}:${first.port}`;
    for (const port of service.spec.ports) {
      const p = `${prefix}_PORT_${port.port}_${(port.protocol ?? 'TCP').toUpperCase()}`;
      env[p] = `tcp://${ip}:${port.port}`;
      env[`${p}_PROTO`] = (port.protocol ?? 'TCP').toLowerCase();
      env[`${p}_PORT`] = String(port.port);
      env[`${p}_ADDR`] = ip;
      if (port.name) env[`${prefix}_SERVICE_PORT_${port.name.toUpperCase().replace(/-/g, '_')}`] = String(port.port);
    }
  }
  return env;
}

/**
 * The environment of one container: runtime defaults, image ENV, HOSTNAME, service links, envFrom, then
 * env in order (each value may use the ones before it).
 */
export function containerEnv({ container, pod, image, objects, links }) {
  const where = `${pod.name} container ${container.name}`;
  const env = { ...RUNTIME_ENV, ...image.env, HOSTNAME: pod.name, ...links };
  for (const from of container.envFrom ?? []) {
    const kind = from.configMapRef ? 'ConfigMap' : 'Secret';
    const ref = from.configMapRef ?? from.secretRef;
    const object = objects.find((o) => o.kind === kind && o.metadata.name === ref.name);
    if (!object) throw new Error(`${where}: envFrom ${kind} ${ref.name} is not rendered`);
    for (const key of Object.keys(object.data ?? {}))
      env[`${from.prefix ?? ''}${key}`] = kind === 'Secret' ? decode(object, key) : object.data[key];
  }
  for (const entry of container.env ?? []) {
    let value;
    if ('value' in entry) value = expand(String(entry.value ?? ''), env);
    else if (entry.valueFrom?.secretKeyRef) value = keyOf(objects, 'Secret', entry.valueFrom.secretKeyRef, where);
    else if (entry.valueFrom?.configMapKeyRef)
      value = keyOf(objects, 'ConfigMap', entry.valueFrom.configMapKeyRef, where);
    else if (entry.valueFrom?.fieldRef) value = fieldRef(entry.valueFrom.fieldRef.fieldPath, pod, where);
    else if (entry.valueFrom?.resourceFieldRef)
      value = resourceField(entry.valueFrom.resourceFieldRef, pod, container, where);
    else value = '';
    if (value !== undefined) env[entry.name] = value;
  }
  return env;
}

function fieldRef(path, pod, where) {
  const fields = {
    'metadata.name': pod.name,
    'metadata.namespace': pod.namespace,
    'status.podIP': pod.ip,
    'spec.nodeName': 'k8s-check-node',
    'spec.serviceAccountName': 'default',
  };
  const label = path.match(/^metadata\.labels\['(.+)'\]$/);
  if (label) return pod.labels[label[1]] ?? '';
  if (!(path in fields)) throw new Error(`${where}: fieldRef ${path} is not supported by this check`);
  return fields[path];
}

function resourceField(ref, pod, container, where) {
  const target = ref.containerName ? pod.containers.find((c) => c.name === ref.containerName) : container;
  if (!target) throw new Error(`${where}: resourceFieldRef names container ${ref.containerName}, which the pod lacks`);
  const [kind, resource] = ref.resource.split('.');
  const value = target.resources?.[kind]?.[resource] ?? target.resources?.limits?.[resource];
  if (value === undefined)
    throw new Error(`${where}: resourceFieldRef ${ref.resource} is not set on container ${target.name}`);
  return quantity(value, ref.divisor ?? '1');
}

/**
 * The argv Kubernetes starts: `command` replaces the image's ENTRYPOINT and then the image's CMD is
 * dropped; `args` replaces CMD. $(VAR) references expand against the container's env.
 */
export function containerArgv(container, image, env) {
  const entrypoint = container.command ?? image.entrypoint;
  const cmd = container.args ?? (container.command ? [] : image.cmd);
  const argv = [...entrypoint, ...cmd].map((a) => expand(String(a), env));
  if (argv.length === 0)
    throw new Error(`container ${container.name}: neither the image nor the container says what to run`);
  return argv;
}

/**
 * What each volume of a pod holds: `files` for ConfigMap and Secret volumes (name → content, with
 * `items` and `defaultMode`), `emptyDir`, or a `claim` (a PersistentVolumeClaim by name, a
 * volumeClaimTemplate's `<template>-<pod>`).
 */
export function podVolumes(spec, pod, objects) {
  const volumes = new Map();
  for (const volume of spec.volumes ?? []) {
    const source = volume.configMap ?? volume.secret;
    if (source) {
      const kind = volume.configMap ? 'ConfigMap' : 'Secret';
      const name = source.name ?? source.secretName;
      const object = objects.find((o) => o.kind === kind && o.metadata.name === name);
      if (!object) {
        if (source.optional) {
          volumes.set(volume.name, { files: {}, mode: 0o644 });
          continue;
        }
        throw new Error(
          `${pod.name}: volume ${volume.name} needs ${kind} ${name}, which is not rendered (the pod would stay in ContainerCreating)`,
        );
      }
      const data =
        kind === 'Secret'
          ? Object.fromEntries(Object.keys(object.data ?? {}).map((k) => [k, decode(object, k)]))
          : { ...object.data };
      const items = source.items ?? Object.keys(data).map((key) => ({ key, path: key }));
      const files = {};
      for (const item of items) {
        if (!(item.key in data))
          throw new Error(`${pod.name}: volume ${volume.name}: ${kind} ${name} has no key ${item.key}`);
        files[item.path] = data[item.key];
      }
      volumes.set(volume.name, { files, mode: source.defaultMode ?? 0o644 });
    } else if (volume.emptyDir) volumes.set(volume.name, { emptyDir: true });
    else if (volume.persistentVolumeClaim) {
      const claim = objects.find(
        (o) => o.kind === 'PersistentVolumeClaim' && o.metadata.name === volume.persistentVolumeClaim.claimName,
      );
      if (!claim)
        throw new Error(
          `${pod.name}: volume ${volume.name} needs PersistentVolumeClaim ${volume.persistentVolumeClaim.claimName}, which is not rendered (the pod would stay Pending)`,
        );
      volumes.set(volume.name, {
        claim: claim.metadata.name,
        readOnly: volume.persistentVolumeClaim.readOnly === true,
      });
    } else if (volume.projected || volume.downwardAPI || volume.hostPath || volume.csi || volume.ephemeral) {
      throw new Error(
        `${pod.name}: volume ${volume.name}: this check does not materialise ${Object.keys(volume)
          .filter((k) => k !== 'name')
          .join(', ')} volumes`,
      );
    }
  }
  for (const template of pod.claimTemplates ?? [])
    volumes.set(template.metadata.name, { claim: `${template.metadata.name}-${pod.name}` });
  return volumes;
}

/** A probe or handler's target as the kubelet resolves it: named ports become the container's numbers. */
export function resolvePort(port, container) {
  if (typeof port === 'number' || /^\d+$/.test(String(port))) return Number(port);
  const found = (container.ports ?? []).find((p) => p.name === port);
  if (!found) throw new Error(`container ${container.name}: probe port ${port} is not one of its named ports`);
  return found.containerPort;
}

/** The pods a workload makes: StatefulSets by ordinal, Deployments and Jobs one pod (a stable made-up suffix). */
export function podsOf(workload, { deploymentReplicas = 1 } = {}) {
  const spec = workload.spec.template.spec;
  const replicas =
    workload.kind === 'StatefulSet'
      ? (workload.spec.replicas ?? 1)
      : Math.min(workload.spec.replicas ?? 1, deploymentReplicas);
  return Array.from({ length: replicas }, (_, i) => ({
    workload,
    name:
      workload.kind === 'StatefulSet'
        ? `${workload.metadata.name}-${i}`
        : `${workload.metadata.name}-7c9d5f4b8-k8s${i}`,
    namespace: workload.metadata.namespace ?? 'default',
    labels: workload.spec.template.metadata?.labels ?? {},
    spec,
    containers: spec.containers,
    claimTemplates: workload.kind === 'StatefulSet' ? workload.spec.volumeClaimTemplates : undefined,
    subdomain: workload.kind === 'StatefulSet' ? workload.spec.serviceName : undefined,
  }));
}

/** The names a pod's /etc/hosts must resolve: every Service (headless per-pod names too), in each DNS form. */
export function hostsFile(pods, services, namespace) {
  const lines = ['127.0.0.1 localhost', '::1 localhost ip6-localhost ip6-loopback'];
  const forms = (name) => [
    name,
    `${name}.${namespace}`,
    `${name}.${namespace}.svc`,
    `${name}.${namespace}.svc.cluster.local`,
  ];
  for (const service of services) {
    const selected = pods.filter((p) =>
      Object.entries(service.spec.selector ?? {}).every(([k, v]) => p.labels[k] === v),
    );
    if (selected.length === 0) continue;
    // No kube-proxy here: a ClusterIP name resolves to its first pod.
    lines.push(`${selected[0].ip} ${forms(service.metadata.name).join(' ')}`);
    if (service.spec.clusterIP === 'None')
      for (const pod of selected)
        if (pod.subdomain === service.metadata.name)
          lines.push(`${pod.ip} ${forms(`${pod.name}.${service.metadata.name}`).join(' ')}`);
  }
  return `${lines.join('\n')}\n`;
}

/** The user a container runs as: container securityContext, then the pod's, then the image's USER. */
export function runAs(container, spec, image) {
  const [imageUser, imageGroup] = String(image.user ?? '0:0').split(':');
  const uid = container.securityContext?.runAsUser ?? spec.securityContext?.runAsUser ?? Number(imageUser);
  const gid = container.securityContext?.runAsGroup ?? spec.securityContext?.runAsGroup ?? Number(imageGroup ?? 0);
  if (Number.isNaN(uid))
    throw new Error(
      `container ${container.name}: the image's USER ${image.user} is not numeric, so runAsNonRoot cannot verify it`,
    );
  if ((container.securityContext?.runAsNonRoot ?? spec.securityContext?.runAsNonRoot) && uid === 0)
    throw new Error(`container ${container.name}: runAsNonRoot but it would run as root (CreateContainerConfigError)`);
  return { uid, gid, fsGroup: spec.securityContext?.fsGroup };
}
