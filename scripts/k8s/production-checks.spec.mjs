// node --test scripts/k8s/production-checks.spec.mjs (run by `npm run test:k8s`): the rendered k8s/
// passes every production check, and each check fails on the rendering broken the way the manifests
// were before (one row per finding).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';
import { checkMonitoring, checkProduction } from './production-checks.mjs';
import { render } from './render.mjs';

const base = render(['ingress', 'monitoring']);
const find = (objects, kind, name) => objects.find((o) => o.kind === kind && o.metadata.name.startsWith(name));
const container = (objects, kind, name) => find(objects, kind, name).spec.template.spec.containers[0];
const editConfig = (objects, name, edit) => {
  const map = find(objects, 'ConfigMap', name);
  const config = parseYaml(map.data['cortex.yaml']);
  edit(config);
  map.data['cortex.yaml'] = stringifyYaml(config);
};
const problems = (objects) => {
  const found = [];
  checkProduction(objects, 'k8s', (where, message) => found.push(`${where}: ${message}`));
  checkMonitoring(objects, 'k8s', (where, message) => found.push(`${where}: ${message}`));
  return found;
};

test('the rendered manifests pass every production check', () => {
  assert.deepEqual(problems(base), []);
});

const BROKEN = [
  [
    'no API keys for the gateway',
    (o) => {
      container(o, 'Deployment', 'gateway').env = container(o, 'Deployment', 'gateway').env.filter(
        (e) => !e.name.endsWith('_KEYS'),
      );
    },
    /CORTEX_API_KEYS must come from a rendered Secret/,
  ],
  [
    'the old 30 s grace for a 300 s drain',
    (o) => {
      find(o, 'Deployment', 'worker').spec.template.spec.terminationGracePeriodSeconds = 30;
    },
    /worker: terminationGracePeriodSeconds 30 < /,
  ],
  [
    'the default 10 s drain',
    (o) => editConfig(o, 'cortex-config', (c) => delete c.drain_timeout_ms),
    /drain_timeout_ms is 10000/,
  ],
  [
    'workers on the catalogue ConfigMap',
    (o) => {
      find(o, 'Deployment', 'worker').spec.template.spec.volumes.find((v) => v.name === 'config').configMap.name = find(
        o,
        'ConfigMap',
        'cortex-config-',
      ).metadata.name;
    },
    /same ConfigMap as the gateway/,
  ],
  [
    'ready = available',
    (o) => {
      delete find(o, 'Deployment', 'worker').spec.minReadySeconds;
    },
    /minReadySeconds 0/,
  ],
  [
    'models in an emptyDir',
    (o) => {
      find(o, 'Deployment', 'worker').spec.template.spec.volumes.find(
        (v) => v.name === 'models',
      ).persistentVolumeClaim = undefined;
    },
    /is not a PersistentVolumeClaim's mount/,
  ],
  [
    'a ReadWriteOnce models claim',
    (o) => {
      find(o, 'PersistentVolumeClaim', 'cortex-models').spec.accessModes = ['ReadWriteOnce'];
    },
    /needs ReadWriteMany/,
  ],
  [
    'no HF_TOKEN slot',
    (o) => {
      container(o, 'Job', 'models-pull').env = container(o, 'Job', 'models-pull').env.filter(
        (e) => e.name !== 'HF_TOKEN',
      );
    },
    /HF_TOKEN/,
  ],
  [
    'routes without verify',
    (o) => {
      const m = find(o, 'ConfigMap', 'nats-config');
      m.data['nats.conf'] = m.data['nats.conf'].replace('verify: true', '');
    },
    /verify: true/,
  ],
  [
    'clients without TLS',
    (o) => editConfig(o, 'cortex-config', (c) => (c.nats.url = c.nats.url.replaceAll('tls://', 'nats://'))),
    /is not TLS/,
  ],
  ['no NetworkPolicies', (o) => o.splice(0, o.length, ...o.filter((x) => x.kind !== 'NetworkPolicy')), /default-deny/],
  [
    'routes open to every pod',
    (o) => {
      find(o, 'NetworkPolicy', 'nats').spec.ingress.find((r) => r.ports[0].port === 6222).from = [{ podSelector: {} }];
    },
    /6222 \(routes\) must be open only to NATS pods/,
  ],
  [
    'preferred anti-affinity only',
    (o) => {
      find(o, 'StatefulSet', 'nats').spec.template.spec.topologySpreadConstraints[0].whenUnsatisfiable =
        'ScheduleAnyway';
    },
    /DoNotSchedule/,
  ],
  [
    'unbounded Responses stores',
    (o) => editConfig(o, 'cortex-config', (c) => delete c.responses.max_bytes),
    /responses.max_bytes/,
  ],
  [
    'no exporter',
    (o) => {
      const s = find(o, 'StatefulSet', 'nats').spec.template.spec;
      s.containers = s.containers.slice(0, 1);
    },
    /prometheus-nats-exporter/,
  ],
  [
    'no JetStream alert',
    (o) => {
      find(o, 'PrometheusRule', 'cortex').spec.groups.shift();
    },
    /JetStream store filling/,
  ],
  [
    'a 1 MB ingress body limit',
    (o) => {
      find(o, 'Ingress', 'gateway').metadata.annotations['nginx.ingress.kubernetes.io/proxy-body-size'] = '1m';
    },
    /proxy-body-size 1m/,
  ],
  [
    'a 60 s ingress read timeout',
    (o) => {
      find(o, 'Ingress', 'gateway').metadata.annotations['nginx.ingress.kubernetes.io/proxy-read-timeout'] = '60';
    },
    /proxy-read-timeout must be at least 3600/,
  ],
  [
    '8 Gi requested, 32 Gi limit',
    (o) => {
      container(o, 'Deployment', 'worker').resources.requests.memory = '8Gi';
    },
    /memory request 8Gi ≠ limit 32Gi/,
  ],
  [
    'no PriorityClass',
    (o) => {
      delete find(o, 'Deployment', 'worker').spec.template.spec.priorityClassName;
    },
    /needs a rendered PriorityClass/,
  ],
  [
    'no startupProbe on the router',
    (o) => {
      delete container(o, 'Deployment', 'router').startupProbe;
    },
    /router container router: needs a startupProbe/,
  ],
  [
    'the Namespace in the kustomization',
    (o) => o.push({ kind: 'Namespace', metadata: { name: 'cortex' } }),
    /kubectl delete -k/,
  ],
];

for (const [finding, breakIt, expected] of BROKEN) {
  test(`fails on: ${finding}`, () => {
    const objects = JSON.parse(JSON.stringify(base));
    breakIt(objects);
    const found = problems(objects);
    assert.ok(
      found.some((p) => expected.test(p)),
      `expected a problem matching ${expected}, got:\n${found.join('\n')}`,
    );
  });
}
