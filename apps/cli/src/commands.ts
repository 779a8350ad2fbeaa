import type { CommandSpec } from './args.js';

const JSON_OPTION = { type: 'boolean', description: 'print the answer as JSON, for scripts' } as const;
const WORKER_OPTION = { type: 'string', value: 'id', description: 'this worker only' } as const;

/** The limits and scope of a key, for create and update (update takes "none" to remove a limit). */
const KEY_OPTIONS = {
  account: { type: 'string', value: 'name', description: 'the account (team) it belongs to; default "default"' },
  rpm: { type: 'string', value: 'n', description: 'requests per minute' },
  tpm: {
    type: 'string',
    value: 'n',
    description: 'tokens per minute (a request reserves its prompt bytes plus its output cap)',
  },
  concurrency: { type: 'string', value: 'n', description: 'requests at once' },
  budget: {
    type: 'string',
    value: 'tokens',
    description: 'token budget, prompt + completion tokens; refused with insufficient_quota once spent',
  },
  'budget-window': {
    type: 'string',
    value: 'window',
    description: 'balance (never resets, the default), day or month (UTC)',
  },
  'money-budget': {
    type: 'string',
    value: 'amount',
    description:
      "money budget in billing.currency, at the catalogue's prices (e.g. 50 or 0.25); refused with insufficient_quota once spent",
  },
  'money-window': {
    type: 'string',
    value: 'window',
    description: "the money budget's window: balance (never resets, the default), day or month (UTC)",
  },
  model: {
    type: 'string',
    multiple: true,
    value: 'id',
    description: 'a model it may use; comma-separated lists too (default: every model)',
  },
  'mcp-server': {
    type: 'string',
    multiple: true,
    value: 'label',
    description: 'an MCP server (its mcp.servers label) it may use; comma-separated lists too (default: every server)',
  },
  expires: { type: 'string', value: 'time', description: 'ISO 8601 time after which it is refused, e.g. 2027-01-31' },
  tier: {
    type: 'string',
    value: '1-9',
    description: 'priority tier when a model is saturated, 9 first, 1 last (default 5)',
  },
  json: JSON_OPTION,
} as const;

/** A catalogue model's fields, for `models add` and `models set` (set takes "none" to return a field to its default). */
const MODEL_OPTIONS = {
  'context-size': { type: 'string', value: 'tokens', description: 'context length per sequence (default 2048)' },
  slots: { type: 'string', value: 'n', description: 'requests it serves at once per copy (default 4)' },
  kind: { type: 'string', value: 'kind', description: 'chat (default), embedding or ranking' },
  alias: {
    type: 'string',
    multiple: true,
    value: 'name',
    description: 'another name clients may use; repeat for more',
  },
  priority: { type: 'string', value: 'n', description: 'eviction priority, 0-1000 (default 0)' },
  pinned: { type: 'string', value: 'true|false', description: 'keep it loaded: never evicted or unloaded when idle' },
  draft: {
    type: 'string',
    value: 'model',
    description: 'speculative decoding: a catalogue id, a GGUF source, or lookup',
  },
  'idle-ttl': { type: 'string', value: 'seconds', description: 'unloaded after this long unused (0 keeps it)' },
  'min-replicas': { type: 'string', value: 'n', description: 'copies kept once loaded (default 1)' },
  'max-replicas': { type: 'string', value: 'n', description: 'most copies across workers (0: one per worker)' },
  worker: {
    type: 'string',
    multiple: true,
    value: 'id',
    description: 'a worker it should live on, in order of preference; repeat for more',
  },
  json: JSON_OPTION,
} as const;

/** Every `cortex` command: what the parser accepts and what `--help` says. */
export const COMMANDS: readonly CommandSpec[] = [
  {
    name: 'serve',
    summary: 'run NATS (if none answers), router, translator, metrics, worker and gateway',
    details:
      'With names, only those services (router, translator, metrics, worker, gateway); one name runs it in this process.',
    positionals: [{ name: 'service', variadic: true }],
  },
  {
    name: 'status',
    summary: 'services, workers, devices, loaded models and in-flight requests',
    options: {
      json: JSON_OPTION,
      watch: { type: 'boolean', description: 'keep it up to date, with lifecycle events as they happen' },
      interval: {
        type: 'string',
        value: 'ms',
        description: 'with --watch: how often to refresh (default 1000, at least 100)',
      },
    },
  },
  {
    name: 'health',
    summary: 'the fleet in one word: ok, impaired or degraded, and why',
    details:
      "The same verdict as the gateway's GET /health. Exit status: 0 ok, 3 " +
      'impaired (something is down, every model can still be served), 4 degraded ' +
      '(a model cannot be served, or NATS, JetStream or every router is gone).',
    options: { json: JSON_OPTION },
  },
  {
    name: 'models',
    summary: 'the catalogue: where each model is loaded, pinned, context',
    options: { json: JSON_OPTION },
  },
  {
    name: 'models add',
    summary: 'add a model to the catalogue: every router and gateway serves it from the next request',
    details:
      "The source is an absolute path on the workers' hosts, an hf: URI, an " +
      'https:// URL or fixture:<name>. Models added at run time are kept in ' +
      "NATS (bucket cortex_catalogue) on top of the config file's models.",
    positionals: [
      { name: 'id', required: true },
      { name: 'source', required: true },
    ],
    options: MODEL_OPTIONS,
  },
  {
    name: 'models set',
    summary: "change a catalogue model's fields (copies loaded now keep theirs until they load again)",
    details: 'A field given as "none" returns to its default. --file changes the source.',
    positionals: [{ name: 'id', required: true }],
    options: { file: { type: 'string', value: 'source', description: 'a new source' }, ...MODEL_OPTIONS },
  },
  {
    name: 'models remove',
    summary: 'remove a model from the catalogue; where it is loaded it drains, then unloads',
    positionals: [{ name: 'id', required: true }],
    options: { json: JSON_OPTION },
  },
  {
    name: 'load',
    summary: 'load a model now',
    positionals: [{ name: 'model', required: true }],
    options: {
      worker: WORKER_OPTION,
      json: { type: 'boolean', description: "print the router's answer instead of a sentence" },
    },
  },
  {
    name: 'unload',
    summary: 'unload a model (from every worker unless one is named)',
    positionals: [{ name: 'model', required: true }],
    options: {
      worker: WORKER_OPTION,
      json: { type: 'boolean', description: "print the router's answer instead of a sentence" },
    },
  },
  {
    name: 'pin',
    summary: 'keep a model loaded: never evicted, loaded now if it is not',
    positionals: [{ name: 'model', required: true }],
    options: { json: { type: 'boolean', description: "print the router's answer instead of a sentence" } },
  },
  {
    name: 'unpin',
    summary: 'let a pinned model be evicted or unloaded when idle again',
    positionals: [{ name: 'model', required: true }],
    options: { json: { type: 'boolean', description: "print the router's answer instead of a sentence" } },
  },
  {
    name: 'keys create',
    summary: 'a new API key; its secret is printed once',
    options: { name: { type: 'string', value: 'name', description: 'whose key it is (required)' }, ...KEY_OPTIONS },
  },
  {
    name: 'keys list',
    summary: 'every stored key: id, name, account, state, limits',
    options: { account: { type: 'string', value: 'name', description: "only this account's keys" }, json: JSON_OPTION },
  },
  {
    name: 'keys show',
    summary: 'one key: its limits, models, expiry and state',
    positionals: [{ name: 'id', required: true }],
    options: { json: JSON_OPTION },
  },
  {
    name: 'keys update',
    summary: "change a key's name, account, limits, models, expiry or tier",
    details:
      'A limit given as "none" is removed; --model none allows every model again; --expires none removes the expiry.',
    positionals: [{ name: 'id', required: true }],
    options: { name: { type: 'string', value: 'name', description: 'a new name' }, ...KEY_OPTIONS },
  },
  {
    name: 'keys rotate',
    summary: 'a new secret for a key, printed once; the old one works for --grace seconds',
    positionals: [{ name: 'id', required: true }],
    options: {
      grace: { type: 'string', value: 'seconds', description: 'how long the old secret keeps working (default 0)' },
      json: JSON_OPTION,
    },
  },
  {
    name: 'keys revoke',
    summary: 'refuse a key on every gateway, within a second',
    positionals: [{ name: 'id', required: true }],
    options: { json: JSON_OPTION },
  },
  {
    name: 'keys apply',
    summary: 'make the stored keys and accounts what a file (YAML or JSON) declares',
    details:
      'Keys are matched by name; fields the file leaves out take their defaults. A ' +
      'secret is declared as secret_sha256 (its SHA-256) or secret_env (the variable ' +
      'holding it), never written in the file; a new key that declares none gets one, ' +
      'printed once. Keys the file does not name are listed and left as they are ' +
      '(--prune revokes them). A file of - is read from standard input. See docs/keys.md.',
    positionals: [{ name: 'file', required: true }],
    options: {
      'dry-run': { type: 'boolean', description: 'say what would change, write nothing' },
      prune: { type: 'boolean', description: 'revoke the stored keys the file does not name' },
      json: JSON_OPTION,
    },
  },
  { name: 'accounts list', summary: 'every account with limits', options: { json: JSON_OPTION } },
  {
    name: 'accounts set',
    summary: "set an account's limits (the tighter of key and account applies)",
    details: 'A limit given as "none" is removed.',
    positionals: [{ name: 'name', required: true }],
    options: {
      rpm: KEY_OPTIONS.rpm,
      tpm: KEY_OPTIONS.tpm,
      concurrency: KEY_OPTIONS.concurrency,
      budget: KEY_OPTIONS.budget,
      'budget-window': KEY_OPTIONS['budget-window'],
      'money-budget': KEY_OPTIONS['money-budget'],
      'money-window': KEY_OPTIONS['money-window'],
      json: JSON_OPTION,
    },
  },
  {
    name: 'fixtures',
    summary: 'write the generated fixture models (default .cortex/models, or worker.models_dir)',
    positionals: [{ name: 'dir' }],
  },
  {
    name: 'pull',
    summary:
      'put a catalogue model or a source (default: every catalogue model) into worker.models_dir, as a worker would',
    details:
      'Fixtures are written, hf: URIs and URLs downloaded (HF_TOKEN for gated ' +
      'ones): resumed where an interrupted pull stopped, once however many ' +
      'processes pull into the directory, checked (size, SHA-256, GGUF) before ' +
      'use. Progress is one updating line on a terminal, plain lines otherwise.',
    positionals: [{ name: 'model|source' }],
    options: {
      worker: {
        type: 'string',
        value: 'id',
        description: 'have this worker download the catalogue model instead (over the bus)',
      },
      all: { type: 'boolean', description: 'have every worker up download the catalogue model' },
      json: { type: 'boolean', description: 'progress and results as JSON lines, for scripts' },
    },
  },
];
