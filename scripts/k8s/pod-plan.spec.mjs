// node --test scripts/k8s/ (run by `npm run test:k8s`): how the check resolves what a pod runs.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  containerArgv,
  containerEnv,
  dockerfileStage,
  expand,
  hostsFile,
  podVolumes,
  quantity,
  resolvePort,
  runAs,
} from './pod-plan.mjs';

const b64 = (s) => Buffer.from(s).toString('base64');
const objects = [
  { kind: 'Secret', metadata: { name: 'keys' }, data: { api: b64('k1,k2') } },
  { kind: 'ConfigMap', metadata: { name: 'cfg' }, data: { 'a.yaml': 'x: 1', mode: 'fast' } },
];
const pod = { name: 'gw-0', namespace: 'cortex', ip: '10.244.0.10', labels: { app: 'gw' }, containers: [] };
const image = {
  entrypoint: ['node', 'main.js'],
  cmd: ['serve'],
  env: { NODE_ENV: 'production' },
  workdir: '/app',
  user: '1000:1000',
};

test('$(VAR) expansion: earlier variables only, $$ escapes, unknown ones stay', () => {
  for (const [value, env, expected] of [
    ['"$(A)"', { A: 's3' }, '"s3"'],
    ['$(B)', { A: 's3' }, '$(B)'],
    ['$$(A)', { A: 's3' }, '$(A)'],
    ['x$(A)y$(A)', { A: '1' }, 'x1y1'],
  ])
    assert.equal(expand(value, env), expected, value);
});

test('container env: image ENV, then env in order, from Secrets, ConfigMaps and the downward API', () => {
  const container = {
    name: 'gw',
    resources: { requests: { cpu: '1500m' } },
    env: [
      { name: 'KEYS', valueFrom: { secretKeyRef: { name: 'keys', key: 'api' } } },
      { name: 'MODE', valueFrom: { configMapKeyRef: { name: 'cfg', key: 'mode' } } },
      { name: 'ID', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
      { name: 'THREADS', valueFrom: { resourceFieldRef: { resource: 'requests.cpu', divisor: '1' } } },
      { name: 'QUOTED', value: '"$(KEYS)"' },
      { name: 'NODE_ENV', value: 'test' },
    ],
  };
  const env = containerEnv({
    container,
    pod: { ...pod, containers: [container] },
    image,
    objects,
    links: { NATS_SERVICE_HOST: '10.0.0.1' },
  });
  assert.equal(env.KEYS, 'k1,k2');
  assert.equal(env.MODE, 'fast');
  assert.equal(env.ID, 'gw-0');
  assert.equal(env.THREADS, '2');
  assert.equal(env.QUOTED, '"k1,k2"');
  assert.equal(env.NODE_ENV, 'test');
  assert.equal(env.HOSTNAME, 'gw-0');
  assert.equal(env.NATS_SERVICE_HOST, '10.0.0.1');
});

test('a missing Secret or key is the error Kubernetes would show, not an empty variable', () => {
  for (const ref of [
    { name: 'nope', key: 'api' },
    { name: 'keys', key: 'admin' },
  ]) {
    const container = { name: 'gw', env: [{ name: 'K', valueFrom: { secretKeyRef: ref } }] };
    assert.throws(() => containerEnv({ container, pod, image, objects, links: {} }), /CreateContainerConfigError/);
  }
  const optional = {
    name: 'gw',
    env: [{ name: 'K', valueFrom: { secretKeyRef: { name: 'nope', key: 'x', optional: true } } }],
  };
  assert.equal('K' in containerEnv({ container: optional, pod, image, objects, links: {} }), false);
});

test('command replaces ENTRYPOINT and drops CMD; args replaces CMD', () => {
  for (const [container, expected] of [
    [{ name: 'c' }, ['node', 'main.js', 'serve']],
    [{ name: 'c', args: ['serve', 'gateway'] }, ['node', 'main.js', 'serve', 'gateway']],
    [{ name: 'c', command: ['sh'] }, ['sh']],
    [{ name: 'c', command: ['sh'], args: ['-c', 'echo $(X)'] }, ['sh', '-c', 'echo 1']],
  ])
    assert.deepEqual(containerArgv(container, image, { X: '1' }), expected);
});

test('quantities round up in the divisor unit', () => {
  for (const [value, divisor, expected] of [
    ['2', '1', '2'],
    ['250m', '1', '1'],
    ['1Gi', '1Mi', '1024'],
    ['1500m', '1m', '1500'],
  ])
    assert.equal(quantity(value, divisor), expected);
});

test('volumes: ConfigMap and Secret files (items too), emptyDirs, claims and claim templates', () => {
  const spec = {
    volumes: [
      { name: 'config', configMap: { name: 'cfg' } },
      { name: 'one', configMap: { name: 'cfg', items: [{ key: 'mode', path: 'sub/mode.txt' }] } },
      { name: 'secret', secret: { secretName: 'keys', defaultMode: 0o400 } },
      { name: 'tmp', emptyDir: {} },
    ],
  };
  const volumes = podVolumes(spec, { ...pod, claimTemplates: [{ metadata: { name: 'data' } }] }, objects);
  assert.deepEqual(volumes.get('config').files, { 'a.yaml': 'x: 1', mode: 'fast' });
  assert.deepEqual(volumes.get('one').files, { 'sub/mode.txt': 'fast' });
  assert.deepEqual(volumes.get('secret'), { files: { api: 'k1,k2' }, mode: 0o400 });
  assert.deepEqual(volumes.get('tmp'), { emptyDir: true });
  assert.deepEqual(volumes.get('data'), { claim: 'data-gw-0' });
  assert.throws(
    () => podVolumes({ volumes: [{ name: 'm', persistentVolumeClaim: { claimName: 'models' } }] }, pod, objects),
    /stay Pending/,
  );
});

test('named probe ports, users and /etc/hosts as the kubelet and cluster DNS resolve them', () => {
  assert.equal(resolvePort('http', { name: 'c', ports: [{ name: 'http', containerPort: 31313 }] }), 31313);
  assert.equal(resolvePort(8080, { name: 'c' }), 8080);
  assert.throws(() => resolvePort('probe', { name: 'c', ports: [] }), /not one of its named ports/);
  assert.deepEqual(
    runAs({ name: 'c' }, { securityContext: { runAsUser: 1000, runAsGroup: 1000, fsGroup: 1000 } }, image),
    { uid: 1000, gid: 1000, fsGroup: 1000 },
  );
  assert.throws(
    () => runAs({ name: 'c' }, { securityContext: { runAsNonRoot: true } }, { user: '0:0' }),
    /runAsNonRoot/,
  );
  const pods = [{ ...pod, name: 'nats-0', ip: '10.244.0.20', labels: { app: 'nats' }, subdomain: 'nats-headless' }];
  const hosts = hostsFile(
    pods,
    [{ metadata: { name: 'nats-headless' }, spec: { clusterIP: 'None', selector: { app: 'nats' } } }],
    'cortex',
  );
  assert.match(
    hosts,
    /^10\.244\.0\.20 nats-0\.nats-headless nats-0\.nats-headless\.cortex .*nats-0\.nats-headless\.cortex\.svc\.cluster\.local$/m,
  );
});

test('the Dockerfile stage: ENTRYPOINT, CMD, ENV (continued lines), WORKDIR, USER, inherited from a named stage', () => {
  const text =
    'FROM node AS base\nENV A=1 \\\n    B="two"\nWORKDIR /app\nFROM base AS runtime\nUSER 1000:1000\nENTRYPOINT ["node", "main.js"]\nCMD ["serve"]\n';
  assert.deepEqual(dockerfileStage(text, 'runtime'), {
    entrypoint: ['node', 'main.js'],
    cmd: ['serve'],
    env: { A: '1', B: 'two' },
    workdir: '/app',
    user: '1000:1000',
    name: 'runtime',
  });
  assert.throws(() => dockerfileStage(text, 'nope'), /no stage nope/);
});
