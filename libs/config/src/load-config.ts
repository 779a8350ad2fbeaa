import { existsSync, readFileSync } from 'node:fs';
import { dirname, isAbsolute, resolve } from 'node:path';
import { plainToInstance } from 'class-transformer';
import { validateSync, type ValidationError } from 'class-validator';
import { parse as parseYaml } from 'yaml';
import { mcpHeadersProblem, upstreamHeadersProblem } from '@cortex/contracts';
import { CortexConfig, ModelConfig, type McpConfig } from './config.schema.js';

export const DEFAULT_CONFIG_PATH = 'config/cortex.yaml';

/** Environment variables that override the config file; the one place they are named. */
export const ENV_OVERRIDES: ReadonlyArray<{ env: string; path: string; type: 'string' | 'int' | 'list' }> = [
  { env: 'CORTEX_NATS_URL', path: 'nats.url', type: 'string' },
  { env: 'CORTEX_NATS_USER', path: 'nats.user', type: 'string' },
  { env: 'CORTEX_NATS_PASSWORD', path: 'nats.password', type: 'string' },
  { env: 'CORTEX_NATS_TOKEN', path: 'nats.token', type: 'string' },
  { env: 'CORTEX_NATS_CREDS', path: 'nats.creds_file', type: 'string' },
  { env: 'CORTEX_NATS_NKEY_SEED_FILE', path: 'nats.nkey_seed_file', type: 'string' },
  { env: 'CORTEX_NATS_INBOX_PREFIX', path: 'nats.inbox_prefix', type: 'string' },
  { env: 'CORTEX_NATS_TLS_CA', path: 'nats.tls.ca_file', type: 'string' },
  { env: 'CORTEX_NATS_TLS_CERT', path: 'nats.tls.cert_file', type: 'string' },
  { env: 'CORTEX_NATS_TLS_KEY', path: 'nats.tls.key_file', type: 'string' },
  { env: 'CORTEX_NATS_REPLICAS', path: 'nats.replicas', type: 'int' },
  { env: 'CORTEX_LISTEN', path: 'gateway.listen', type: 'string' },
  { env: 'CORTEX_CONSOLE_TITLE', path: 'gateway.console_title', type: 'string' },
  { env: 'CORTEX_METRICS_LISTEN', path: 'metrics.listen', type: 'string' },
  { env: 'CORTEX_PROBE_LISTEN', path: 'probe_listen', type: 'string' },
  { env: 'CORTEX_DRAIN_TIMEOUT_MS', path: 'drain_timeout_ms', type: 'int' },
  { env: 'CORTEX_FORGET_WORKER_AFTER_MS', path: 'router.forget_worker_after_ms', type: 'int' },
  { env: 'CORTEX_WORKER_ID', path: 'worker.id', type: 'string' },
  { env: 'CORTEX_WORKER_THREADS', path: 'worker.threads', type: 'int' },
  { env: 'CORTEX_WORKER_GPU', path: 'worker.gpu', type: 'string' },
  { env: 'CORTEX_WORKER_ENGINE', path: 'worker.engine', type: 'string' },
  { env: 'CORTEX_WORKER_DEVICE', path: 'worker.device', type: 'int' },
  { env: 'CORTEX_WORKER_MEMORY_BUDGET', path: 'worker.memory_budget', type: 'int' },
  { env: 'CORTEX_MODELS_DIR', path: 'worker.models_dir', type: 'string' },
  { env: 'CORTEX_LOG_LEVEL', path: 'log_level', type: 'string' },
  { env: 'CORTEX_LOG_FORMAT', path: 'log_format', type: 'string' },
  { env: 'CORTEX_API_KEYS', path: 'auth.api_keys', type: 'list' },
  { env: 'CORTEX_ADMIN_KEYS', path: 'auth.admin_keys', type: 'list' },
  { env: 'CORTEX_REASONING_KEY', path: 'responses.reasoning_key', type: 'string' },
];

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

export interface LoadedConfig {
  config: CortexConfig;
  /** The file read, or null when built-in defaults were used. */
  path: string | null;
}

/**
 * Reads `CORTEX_CONFIG` (default `config/cortex.yaml`), applies env overrides, validates, and fails
 * with the offending key's path. A missing default file means built-in defaults; a missing file that
 * was asked for by name is an error.
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env, cwd = process.cwd()): LoadedConfig {
  const requested = env.CORTEX_CONFIG;
  const path = resolve(cwd, requested ?? DEFAULT_CONFIG_PATH);
  let raw: unknown = {};
  let usedPath: string | null = null;
  if (existsSync(path)) {
    try {
      raw = parseYaml(readFileSync(path, 'utf8')) ?? {};
    } catch (error) {
      throw new ConfigError(`config ${path}: not valid YAML: ${(error as Error).message}`);
    }
    usedPath = path;
  } else if (requested !== undefined) {
    throw new ConfigError(`config ${path} (from CORTEX_CONFIG) does not exist`);
  }
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new ConfigError(`config ${path}: the top level must be a mapping`);
  }
  const where = usedPath ?? 'built-in defaults';
  const plain = applyEnv(raw as Record<string, unknown>, env);
  const config = parseConfig(plain, where);
  const base = usedPath ? dirname(usedPath) : cwd;
  const local = (source: string): boolean => isLocalPath(source) && !isAbsolute(source);
  const ids = new Set(config.models.map((model) => model.id));
  for (const model of config.models) {
    if (model.file !== undefined && local(model.file)) model.file = resolve(base, model.file);
    // A draft is a catalogue id, `lookup`, or a source written like `file` (relative to this file too).
    if (model.draft && model.draft !== 'lookup' && !ids.has(model.draft) && local(model.draft))
      model.draft = resolve(base, model.draft);
    if (model.chatTemplateFile !== undefined) {
      if (model.chatTemplate !== undefined)
        throw new ConfigError(`${where}: model ${model.id}: set chat_template or chat_template_file, not both`);
      const file = resolve(base, model.chatTemplateFile);
      try {
        model.chatTemplate = readFileSync(file, 'utf8');
      } catch (error) {
        throw new ConfigError(
          `${where}: model ${model.id}: chat_template_file ${file} cannot be read: ${(error as Error).message}`,
        );
      }
      delete model.chatTemplateFile;
    }
  }
  if (!isAbsolute(config.worker.modelsDir)) config.worker.modelsDir = resolve(cwd, config.worker.modelsDir);
  for (const server of config.mcp.servers) if (server.cwd !== undefined) server.cwd = resolve(base, server.cwd);
  return { config, path: usedPath };
}

/** Validates a snake_case plain object (as written in YAML) into a config. */
export function parseConfig(plain: Record<string, unknown>, where = 'config'): CortexConfig {
  const config = plainToInstance(CortexConfig, camelKeys(plain) as object);
  // Declared keys keep the key file's own names (secret_env, requests_per_minute): the gateway reads them as such.
  const auth = plain.auth as { keys?: unknown; accounts?: unknown } | null | undefined;
  if (auth && typeof auth === 'object') {
    if (auth.keys !== undefined) config.auth.keys = auth.keys as unknown[];
    if (auth.accounts !== undefined) config.auth.accounts = auth.accounts as Record<string, unknown>;
  }
  keepMcpMaps(plain, config);
  const errors = validateSync(config, { whitelist: true, forbidNonWhitelisted: true });
  if (errors.length > 0) {
    const lines = errors.flatMap((e) => describe(e, ''));
    throw new ConfigError(`${where}: ${lines.join('; ')}`);
  }
  const nats = config.nats;
  const ways = [
    nats.user !== undefined && 'user',
    nats.token !== undefined && 'token',
    nats.credsFile !== undefined && 'creds_file',
    nats.nkeySeedFile !== undefined && 'nkey_seed_file',
  ].filter(Boolean);
  if (ways.length > 1)
    throw new ConfigError(
      `${where}: nats: set one of user, token, creds_file or nkey_seed_file (got ${ways.join(', ')})`,
    );
  if (nats.password !== undefined && nats.user === undefined)
    throw new ConfigError(`${where}: nats.password: needs nats.user`);
  if ((nats.tls.certFile === undefined) !== (nats.tls.keyFile === undefined))
    throw new ConfigError(`${where}: nats.tls: cert_file and key_file go together`);
  const ids = new Set<string>();
  for (const [i, model] of config.models.entries()) {
    for (const name of [model.id, ...(model.aliases ?? [])]) {
      if (ids.has(name)) throw new ConfigError(`${where}: models[${i}]: id or alias "${name}" is used twice`);
      ids.add(name);
    }
    checkModel(model, `${where}: models[${i}]`, config.replication.maxReplicas);
  }
  checkMcp(config.mcp, where);
  for (const [i, model] of config.models.entries())
    for (const [j, name] of (model.fallback ?? []).entries()) {
      if (!ids.has(name))
        throw new ConfigError(`${where}: models[${i}].fallback[${j}]: no catalogue model is called "${name}"`);
      if (name === model.id || model.aliases?.includes(name))
        throw new ConfigError(`${where}: models[${i}].fallback[${j}]: a model cannot fall back to itself`);
    }
  return config;
}

/**
 * Validates one catalogue model written as in YAML (snake_case), as added at run time through the
 * admin API or `cortex models add`: the same fields and checks as a model in the config file. With no
 * config file to be relative to, a local `file` (and `draft` source) must be an absolute path.
 */
export function parseModelEntry(plain: unknown, replicationMaxReplicas: number, where = 'model'): ModelConfig {
  if (plain === null || typeof plain !== 'object' || Array.isArray(plain))
    throw new ConfigError(`${where}: must be an object`);
  const model = plainToInstance(ModelConfig, camelKeys(plain) as object);
  const errors = validateSync(model, { whitelist: true, forbidNonWhitelisted: true });
  if (errors.length > 0) throw new ConfigError(`${where}: ${errors.flatMap((e) => describe(e, '')).join('; ')}`);
  // A draft may also be a catalogue id, so only one written as a GGUF file is held to the same rule.
  const sources = [['file', model.file], ...(model.draft?.endsWith('.gguf') ? [['draft', model.draft]] : [])];
  for (const [field, source] of sources) {
    if (source && isLocalPath(source) && !isAbsolute(source)) {
      throw new ConfigError(
        `${where}.${field}: "${source}" is a relative path; give an absolute path ` +
          `on the workers' hosts, an hf: URI, an https:// URL or fixture:<name>`,
      );
    }
  }
  checkModel(model, where, replicationMaxReplicas);
  return model;
}

/** A model as written in YAML (snake_case keys, defaults included): what the live catalogue stores and shows. */
export function modelEntry(model: ModelConfig): Record<string, unknown> {
  return snakeKeys({ ...model }) as Record<string, unknown>;
}

/** Checks across a model's fields that class-validator cannot express. */
function checkModel(model: ModelConfig, where: string, replicationMaxReplicas: number): void {
  const most = model.maxReplicas ?? replicationMaxReplicas;
  if (most > 0 && model.minReplicas > most) {
    throw new ConfigError(
      `${where}.min_replicas: ${model.minReplicas} is more than max_replicas (${most}); lower min_replicas or raise max_replicas`,
    );
  }
  if ((model.file === undefined) === (model.upstream === undefined))
    throw new ConfigError(
      `${where}: a model has a file (a GGUF) or an upstream (a server or API it is served from), exactly one`,
    );
  if (model.upstream) checkUpstream(model, where);
  if (model.draft !== undefined && model.kind !== 'chat') {
    throw new ConfigError(
      `${where}.draft: speculative decoding is for generating models, and ${model.id} is a ${model.kind} model; remove draft`,
    );
  }
}

/** What an upstream model may not have: the fields that only mean something for a GGUF a worker runs. */
function checkUpstream(model: ModelConfig, where: string): void {
  const problem = upstreamHeadersProblem(model.upstream?.headers);
  if (problem) throw new ConfigError(`${where}.upstream.headers.${problem}`);
  if (model.kind !== 'chat')
    throw new ConfigError(`${where}.kind: an upstream model is a chat model; remove kind or upstream`);
  for (const field of ['draft', 'mmproj', 'chatTemplate', 'format', 'sha256'] as const)
    if (model[field] !== undefined)
      throw new ConfigError(
        `${where}.${toSnake(field)}: the upstream renders and parses its own output; remove ${toSnake(field)}`,
      );
}

/** An MCP server's `env`, `headers` and `headers_env` are names the program or server reads: kept as written, not camelCased. */
function keepMcpMaps(plain: Record<string, unknown>, config: CortexConfig): void {
  const servers = (plain.mcp as { servers?: unknown } | null | undefined)?.servers;
  if (!Array.isArray(servers)) return;
  servers.forEach((raw: unknown, i) => {
    const server = config.mcp.servers[i];
    if (!server || raw === null || typeof raw !== 'object') return;
    const { env, headers, headers_env: headersEnv } = raw as Record<string, unknown>;
    if (env !== undefined) server.env = env as Record<string, string>;
    if (headers !== undefined) server.headers = headers as Record<string, string>;
    if (headersEnv !== undefined) server.headersEnv = headersEnv as Record<string, string>;
  });
}

/** What class-validator cannot say about `mcp.servers`: one way to reach each, unique labels, well-formed maps. */
function checkMcp(mcp: McpConfig, where: string): void {
  const labels = new Map<string, number>();
  for (const [i, server] of mcp.servers.entries()) {
    const at = `${where}: mcp.servers[${i}]`;
    const first = labels.get(server.label);
    if (first !== undefined)
      throw new ConfigError(
        `${at}.label: "${server.label}" is the label of mcp.servers[${first}] too; labels are unique`,
      );
    labels.set(server.label, i);
    if ((server.url === undefined) === (server.command === undefined))
      throw new ConfigError(
        `${at}: a server has a url (reached over HTTP) or a command (started by the gateway, spoken to over stdio), exactly one`,
      );
    const only = (fields: [string, unknown][], what: string): void => {
      for (const [field, value] of fields)
        if (value !== undefined) throw new ConfigError(`${at}.${field}: is for ${what}; remove it`);
    };
    if (server.url !== undefined)
      only(
        [
          ['args', server.args],
          ['env', server.env],
          ['cwd', server.cwd],
        ],
        'a server started with command',
      );
    else
      only(
        [
          ['transport', server.transport],
          ['headers', server.headers],
          ['headers_env', server.headersEnv],
        ],
        'a server reached at a url',
      );
    for (const [field, map] of [
      ['env', server.env],
      ['headers_env', server.headersEnv],
    ] as const) {
      for (const [name, value] of Object.entries(map ?? {})) {
        if (field === 'env' && !/^[A-Za-z_][A-Za-z0-9_]*$/.test(name))
          throw new ConfigError(`${at}.env.${name}: is not an environment variable's name`);
        if (field === 'env' ? typeof value !== 'string' : !/^[A-Za-z_][A-Za-z0-9_]*$/.test(String(value)))
          throw new ConfigError(
            `${at}.${field}.${name}: must be ${field === 'env' ? 'a string' : "the name of an environment variable (the header's value)"}`,
          );
      }
    }
    const lower = Object.keys(server.headers ?? {}).map((h) => h.toLowerCase());
    const twice = Object.keys(server.headersEnv ?? {}).find((h) => lower.includes(h.toLowerCase()));
    if (twice) throw new ConfigError(`${at}.headers_env.${twice}: is in headers too; keep one`);
    const headers = {
      ...server.headers,
      ...Object.fromEntries(Object.keys(server.headersEnv ?? {}).map((h) => [h, ''])),
    };
    const problem = mcpHeadersProblem(headers);
    if (problem) throw new ConfigError(`${at}.headers: ${problem}`);
  }
}

const isLocalPath = (source: string): boolean => !/^(hf:|fixture:|https?:)/.test(source);

function applyEnv(raw: Record<string, unknown>, env: NodeJS.ProcessEnv): Record<string, unknown> {
  const out = structuredClone(raw);
  // `auth: none` is the documented short form of `auth: {mode: none}`.
  if (out.auth === 'none') out.auth = { mode: 'none' };
  for (const { env: name, path, type } of ENV_OVERRIDES) {
    const value = env[name];
    if (value === undefined || value === '') continue;
    let parsed: string | number | string[] = value;
    if (type === 'list')
      parsed = value
        .split(',')
        .map((item) => item.trim())
        .filter(Boolean);
    if (type === 'int') {
      parsed = Number(value);
      if (!Number.isInteger(parsed)) throw new ConfigError(`${name}=${value}: must be an integer (sets ${path})`);
    }
    const keys = path.split('.');
    let node: Record<string, unknown> = out;
    for (const key of keys.slice(0, -1)) {
      const next = node[key];
      node[key] = next !== null && typeof next === 'object' ? next : {};
      node = node[key] as Record<string, unknown>;
    }
    node[keys[keys.length - 1]!] = parsed;
  }
  return out;
}

const toCamel = (key: string): string => key.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
const toSnake = (key: string): string => key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

function camelKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(camelKeys);
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [toCamel(k), camelKeys(v)]));
}

function snakeKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(snakeKeys);
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([, v]) => v !== undefined)
      .map(([k, v]) => [toSnake(k), snakeKeys(v)]),
  );
}

function describe(error: ValidationError, prefix: string): string[] {
  const key = /^\d+$/.test(error.property) ? `[${error.property}]` : `${prefix ? '.' : ''}${toSnake(error.property)}`;
  const path = prefix + key;
  const own = Object.values(error.constraints ?? {}).map((message) => {
    const text = message.replace(new RegExp(`^(property )?${error.property} `), '');
    return `${path}: ${text} (got ${JSON.stringify(error.value)})`;
  });
  return [...own, ...(error.children ?? []).flatMap((child) => describe(child, path))];
}
