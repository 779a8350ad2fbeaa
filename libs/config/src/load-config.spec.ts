import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, loadConfig, modelEntry, parseConfig, parseModelEntry } from './load-config.js';

function tempConfig(yaml: string): { dir: string; env: NodeJS.ProcessEnv } {
  const dir = mkdtempSync(join(tmpdir(), 'cortex-config-'));
  writeFileSync(join(dir, 'cortex.yaml'), yaml);
  return { dir, env: { CORTEX_CONFIG: join(dir, 'cortex.yaml') } };
}

describe('config', () => {
  it('config - defaults apply when the default file is absent', () => {
    const { config, path } = loadConfig({}, mkdtempSync(join(tmpdir(), 'cortex-empty-')));
    assert.equal(path, null);
    assert.equal(config.gateway.listen, '127.0.0.1:31313');
    assert.equal(config.metrics.listen, '127.0.0.1:31314');
    assert.equal(config.nats.url, 'nats://127.0.0.1:4222');
    assert.equal(config.eviction.strategy, 'lru');
  });

  it('config - snake_case keys map onto the schema and model paths resolve against the file', () => {
    const { dir, env } = tempConfig(
      'eviction:\n  strategy: priority\n  idle_ttl: 30\nmodels:\n  - id: m1\n    file: m1.gguf\n    context_size: 1024\n    pinned: true\n',
    );
    const { config } = loadConfig(env, '/');
    assert.equal(config.eviction.strategy, 'priority');
    assert.equal(config.eviction.idleTtl, 30);
    assert.equal(config.models[0]?.contextSize, 1024);
    assert.equal(config.models[0]?.pinned, true);
    assert.equal(config.models[0]?.slots, 4);
    assert.equal(config.models[0]?.file, join(dir, 'm1.gguf'));
  });

  it('config - a draft written as a path resolves against the file; a catalogue id, lookup or hf: stay as written', () => {
    const { dir, env } = tempConfig(
      'models:\n  - id: small\n    file: small.gguf\n  - id: a\n' +
        '    file: a.gguf\n    draft: drafts/d.gguf\n  - id: b\n    file: b.gguf\n' +
        '    draft: small\n  - id: c\n    file: c.gguf\n    draft: lookup\n',
    );
    const drafts = loadConfig(env, '/').config.models.map((m) => m.draft);
    assert.deepEqual(drafts, [undefined, join(dir, 'drafts/d.gguf'), 'small', 'lookup']);
  });

  it('config - a draft on an embedding or ranking model is refused naming the field', () => {
    assert.throws(
      () => parseConfig({ models: [{ id: 'e', file: 'e.gguf', kind: 'embedding', draft: 'lookup' }] }),
      (error: Error) => error instanceof ConfigError && /models\[0\]\.draft/.test(error.message),
    );
  });

  it('config - replication: a copy per worker by default, max_replicas per model overrides, min over max is refused by path', () => {
    const config = parseConfig({
      models: [
        { id: 'a', file: 'a.gguf' },
        { id: 'b', file: 'b.gguf', max_replicas: 1 },
      ],
    });
    assert.equal(config.replication.maxReplicas, 0);
    assert.deepEqual(
      config.models.map((m) => [m.minReplicas, m.maxReplicas]),
      [
        [1, undefined],
        [1, 1],
      ],
    );
    assert.throws(
      () => parseConfig({ models: [{ id: 'c', file: 'c.gguf', min_replicas: 3, max_replicas: 2 }] }),
      (error: Error) =>
        error instanceof ConfigError &&
        /models\[0\]\.min_replicas: 3 is more than max_replicas \(2\)/.test(error.message),
    );
    assert.throws(() => parseConfig({ replication: { retire_below: 2 } }), /replication\.retire_below/);
  });

  it('config - nats.replicas defaults to 1, CORTEX_NATS_REPLICAS sets it, and a cluster size over 5 is refused by path', () => {
    const empty = mkdtempSync(join(tmpdir(), 'cortex-empty-'));
    assert.equal(loadConfig({}, empty).config.nats.replicas, 1);
    assert.equal(loadConfig({ CORTEX_NATS_REPLICAS: '3' }, empty).config.nats.replicas, 3);
    assert.throws(() => loadConfig({ CORTEX_NATS_REPLICAS: '7' }, empty), /nats\.replicas: .*5/);
  });

  it('config - drain_timeout_ms defaults to 10 s, CORTEX_DRAIN_TIMEOUT_MS and the file set it, a negative one is refused by path', () => {
    const empty = mkdtempSync(join(tmpdir(), 'cortex-empty-'));
    assert.equal(loadConfig({}, empty).config.drainTimeoutMs, 10_000);
    assert.equal(loadConfig({ CORTEX_DRAIN_TIMEOUT_MS: '300000' }, empty).config.drainTimeoutMs, 300_000);
    const { env } = tempConfig('drain_timeout_ms: 60000\n');
    assert.equal(loadConfig(env).config.drainTimeoutMs, 60_000);
    assert.throws(() => loadConfig({ CORTEX_DRAIN_TIMEOUT_MS: '-1' }, empty), /drain_timeout_ms/);
  });

  it('config - a bad value fails fast naming its path', () => {
    assert.throws(
      () =>
        parseConfig({
          models: [
            { id: 'ok', file: 'x.gguf' },
            { id: 'm', file: 'y', context_size: 12 },
          ],
        }),
      (error: Error) => error instanceof ConfigError && /models\[1\]\.context_size: .*128/.test(error.message),
    );
    assert.throws(
      () => parseConfig({ eviction: { strategy: 'random' } }),
      (error: Error) => /eviction\.strategy/.test(error.message),
    );
    assert.throws(() => parseConfig({ gateway: { console_title: 'x'.repeat(81) } }), /gateway\.console_title/);
    assert.equal(parseConfig({ gateway: { console_title: 'lab' } }).gateway.consoleTitle, 'lab');
    assert.equal(parseConfig({}).router.forgetWorkerAfterMs, 600_000);
    assert.equal(parseConfig({ router: { forget_worker_after_ms: 5_000 } }).router.forgetWorkerAfterMs, 5_000);
    assert.throws(
      () => parseConfig({ router: { forget_worker_after_ms: 500 } }),
      /router\.forget_worker_after_ms/,
      'shorter than a worker takes to be down',
    );
  });

  it('config - unknown keys are rejected so typos do not pass silently', () => {
    assert.throws(() => parseConfig({ gateway: { lisen: '1.2.3.4:5' } }), /gateway\.lisen/);
  });

  it('config - duplicate model ids and aliases are rejected', () => {
    assert.throws(
      () =>
        parseConfig({
          models: [
            { id: 'a', file: 'a' },
            { id: 'b', file: 'b', aliases: ['a'] },
          ],
        }),
      /"a" is used twice/,
    );
  });

  it('config - env overrides win over the file', () => {
    const { env } = tempConfig('nats:\n  url: nats://file:4222\n');
    const { config } = loadConfig({ ...env, CORTEX_NATS_URL: 'nats://env:4333', CORTEX_WORKER_THREADS: '2' }, '/');
    assert.equal(config.nats.url, 'nats://env:4333');
    assert.equal(config.worker.threads, 2);
    assert.throws(() => loadConfig({ ...env, CORTEX_WORKER_THREADS: 'two' }, '/'), /CORTEX_WORKER_THREADS/);
  });

  it('config - auth: none is short for mode none, and key lists come from env', () => {
    const { env } = tempConfig('auth: none\n');
    assert.equal(loadConfig(env, '/').config.auth.mode, 'none');
    const { config } = loadConfig(
      { CORTEX_API_KEYS: 'a, b,,c', CORTEX_ADMIN_KEYS: 'root' },
      mkdtempSync(join(tmpdir(), 'cortex-env-')),
    );
    assert.deepEqual(config.auth.apiKeys, ['a', 'b', 'c']);
    assert.deepEqual(config.auth.adminKeys, ['root']);
    assert.equal(config.auth.mode, 'keys');
  });

  it('config - NATS credentials and TLS come from env, and conflicting ways are rejected', () => {
    const dir = mkdtempSync(join(tmpdir(), 'cortex-env-'));
    const { config } = loadConfig(
      {
        CORTEX_NATS_USER: 'router',
        CORTEX_NATS_PASSWORD: 'pw',
        CORTEX_NATS_INBOX_PREFIX: '_INBOX.router',
        CORTEX_NATS_TLS_CA: '/ca.pem',
      },
      dir,
    );
    assert.equal(config.nats.user, 'router');
    assert.equal(config.nats.password, 'pw');
    assert.equal(config.nats.inboxPrefix, '_INBOX.router');
    assert.equal(config.nats.tls.caFile, '/ca.pem');
    assert.throws(
      () => loadConfig({ CORTEX_NATS_USER: 'router', CORTEX_NATS_CREDS: '/x.creds' }, dir),
      /nats: set one of .*got user, creds_file/,
    );
    assert.throws(() => loadConfig({ CORTEX_NATS_PASSWORD: 'pw' }, dir), /nats\.password: needs nats\.user/);
    assert.throws(() => loadConfig({ CORTEX_NATS_TLS_CERT: '/c.pem' }, dir), /cert_file and key_file go together/);
    assert.throws(() => loadConfig({ CORTEX_NATS_INBOX_PREFIX: '_INBOX.>' }, dir), /nats\.inbox_prefix/);
  });

  it('config - mcp: defaults, servers by url or command with their maps kept as written, and each mistake named by path', () => {
    const defaults = parseConfig({}).mcp;
    assert.deepEqual(
      [
        defaults.servers,
        defaults.allowRequestUrls,
        defaults.allowPrivateUrls,
        defaults.listCacheMs,
        defaults.callTimeoutMs,
        defaults.maxOutputBytes,
      ],
      [[], false, false, 60_000, 60_000, 256 * 1024],
    );
    const { dir, env } = tempConfig(
      'mcp:\n  servers:\n' +
        '    - label: docs\n      url: https://mcp.example.com/mcp\n      headers: { x-api_key: k }\n      headers_env: { authorization: DOCS_AUTH }\n' +
        '    - label: fs\n      command: node\n      args: [server.js]\n      cwd: tools\n' +
        '      env: { my_root: /srv, LOG_LEVEL: warn }\n      timeout_ms: 2000\n',
    );
    const [docs, fs] = loadConfig(env, '/').config.mcp.servers;
    assert.deepEqual(docs?.headers, { 'x-api_key': 'k' });
    assert.deepEqual(docs?.headersEnv, { authorization: 'DOCS_AUTH' });
    assert.equal(docs?.maxSessions, 16);
    assert.deepEqual(fs?.env, { my_root: '/srv', LOG_LEVEL: 'warn' });
    assert.equal(fs?.cwd, join(dir, 'tools'));
    assert.equal(fs?.timeoutMs, 2000);
    const refused = (servers: unknown[], pattern: RegExp): void =>
      assert.throws(() => parseConfig({ mcp: { servers } }), pattern);
    refused([{ label: 'a' }], /mcp\.servers\[0\]: a server has a url .* or a command .*, exactly one/);
    refused([{ label: 'a', url: 'https://x', command: 'y' }], /exactly one/);
    refused([{ label: 'bad label', url: 'https://x' }], /mcp\.servers\[0\]\.label: must be 1-64 letters/);
    refused(
      [
        { label: 'a', url: 'https://x' },
        { label: 'a', command: 'y' },
      ],
      /mcp\.servers\[1\]\.label: "a" is the label of mcp\.servers\[0\] too/,
    );
    refused([{ label: 'a', url: 'ftp://x' }], /mcp\.servers\[0\]\.url: must be an http\(s\) URL/);
    refused(
      [{ label: 'a', command: 'y', headers: { authorization: 'z' } }],
      /servers\[0\]\.headers: is for a server reached at a url/,
    );
    refused(
      [{ label: 'a', url: 'https://x', args: ['z'] }],
      /servers\[0\]\.args: is for a server started with command/,
    );
    refused([{ label: 'a', url: 'https://x', headers: { host: 'z' } }], /headers: host: is set by the MCP transport/);
    refused(
      [{ label: 'a', url: 'https://x', headers_env: { authorization: 'not a name' } }],
      /headers_env\.authorization: must be the name/,
    );
    refused(
      [{ label: 'a', url: 'https://x', headers: { Authorization: 'z' }, headers_env: { authorization: 'A' } }],
      /headers_env\.authorization: is in headers too/,
    );
    refused(
      [{ label: 'a', command: 'y', env: { 'NOT-A-NAME': 'z' } }],
      /env\.NOT-A-NAME: is not an environment variable's name/,
    );
    assert.throws(
      () => parseConfig({ mcp: { call_timeout_ms: 5 } }),
      /mcp\.call_timeout_ms: must not be less than 100/,
    );
  });

  it('config - a named file that does not exist is an error', () => {
    assert.throws(() => loadConfig({ CORTEX_CONFIG: '/nonexistent/cortex.yaml' }), /does not exist/);
  });

  it('config - a model added at run time: the same fields, defaults and checks as the file; local paths must be absolute', () => {
    const model = parseModelEntry({ id: 'm', file: '/srv/models/m.gguf', context_size: 4096, aliases: ['mm'] }, 0);
    assert.equal(model.contextSize, 4096);
    assert.equal(model.slots, 4);
    assert.deepEqual(modelEntry(model), {
      id: 'm',
      file: '/srv/models/m.gguf',
      context_size: 4096,
      priority: 0,
      pinned: false,
      slots: 4,
      aliases: ['mm'],
      min_replicas: 1,
      owned_by: 'cortex',
      kind: 'chat',
      matryoshka: false,
    });
    assert.deepEqual(parseModelEntry(modelEntry(model), 0), model, 'what is stored reads back the same');
    assert.equal(
      parseModelEntry({ id: 'h', file: 'hf:org/repo/h.gguf', draft: 'm' }, 0).draft,
      'm',
      'a draft may name a catalogue id',
    );
    assert.throws(() => parseModelEntry({ id: 'r', file: 'r.gguf' }, 0), /model\.file: "r\.gguf" is a relative path/);
    assert.throws(
      () => parseModelEntry({ id: 'r', file: 'fixture:cortex-chat', draft: 'd/draft.gguf' }, 0),
      /model\.draft: "d\/draft\.gguf" is a relative path/,
    );
    assert.throws(
      () => parseModelEntry({ id: 'r', file: 'fixture:cortex-chat', min_replicas: 3 }, 2),
      /model\.min_replicas: 3 is more than max_replicas \(2\)/,
    );
    assert.throws(() => parseModelEntry({ id: 'r', file: 'fixture:cortex-chat', colour: 'red' }, 0), /colour/);
    assert.throws(() => parseModelEntry(['r'], 0), ConfigError);
  });
});
