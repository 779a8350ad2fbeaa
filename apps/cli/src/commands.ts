import type { CommandSpec } from './args.js';

const JSON_OPTION = { type: 'boolean', description: 'print the answer as JSON, for scripts' } as const;
const WORKER_OPTION = { type: 'string', value: 'id', description: 'this worker only' } as const;

/** Every `cortex` command: what the parser accepts and what `--help` says. */
export const COMMANDS: readonly CommandSpec[] = [
  {
    name: 'serve',
    summary: 'run NATS (if none answers), router, translator, metrics, worker and gateway',
    details: 'With names, only those services (router, translator, metrics, worker, gateway); one name runs it in this process.',
    positionals: [{ name: 'service', variadic: true }],
  },
  {
    name: 'status',
    summary: 'services, workers, devices, loaded models and in-flight requests',
    options: {
      json: JSON_OPTION,
      watch: { type: 'boolean', description: 'keep it up to date, with lifecycle events as they happen' },
      interval: { type: 'string', value: 'ms', description: 'with --watch: how often to refresh (default 1000, at least 100)' },
    },
  },
  { name: 'models', summary: 'the catalogue: where each model is loaded, pinned, context', options: { json: JSON_OPTION } },
  {
    name: 'load',
    summary: 'load a model now',
    positionals: [{ name: 'model', required: true }],
    options: { worker: WORKER_OPTION, json: { type: 'boolean', description: "print the router's answer instead of a sentence" } },
  },
  {
    name: 'unload',
    summary: 'unload a model (from every worker unless one is named)',
    positionals: [{ name: 'model', required: true }],
    options: { worker: WORKER_OPTION, json: { type: 'boolean', description: "print the router's answer instead of a sentence" } },
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
    name: 'fixtures',
    summary: 'write the generated fixture models (default .cortex/models, or worker.models_dir)',
    positionals: [{ name: 'dir' }],
  },
];
