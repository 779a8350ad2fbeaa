import type { CatalogueEntry } from '@cortex/contracts';

export interface BannerFacts {
  /** `gateway.listen`. */
  listen: string;
  /** `metrics.listen`, or null when the metrics service is not started. */
  metricsListen: string | null;
  /** The config file in use, or null for built-in defaults. */
  configPath: string | null;
  catalogue: CatalogueEntry[];
}

/** An address a browser or curl can open: a wildcard listen address is reached as localhost. */
export function reachableUrl(listen: string): string {
  const host = listen.replace(/:\d+$/, '');
  const port = listen.slice(host.length + 1);
  return `http://${['0.0.0.0', '[::]', '::'].includes(host) ? 'localhost' : host}:${port}`;
}

/** What `cortex serve` prints once everything is up: where to send requests, what is loaded where, and how to stop. */
export function formatBanner(facts: BannerFacts): string {
  const models = facts.catalogue.map((model) => {
    const ready = model.locations.filter((l) => l.state === 'ready').map((l) => l.workerId);
    const where = ready.length > 0 ? `loaded on ${ready.join(', ')}` : 'loads on its first request';
    return `${model.id} (${where}${model.pinned ? ', pinned' : ''})`;
  });
  const lines = [
    '',
    'cortex is ready',
    `  API      ${reachableUrl(facts.listen)}/v1  (OpenAI Chat Completions and Responses, Anthropic Messages)`,
    `  models   ${models.length > 0 ? models.join('\n           ') : 'none in the catalogue: add some under models: in the config'}`,
  ];
  if (facts.metricsListen) lines.push(`  metrics  ${reachableUrl(facts.metricsListen)}/metrics`);
  lines.push(
    `  config   ${facts.configPath ?? 'built-in defaults (no config/cortex.yaml; set CORTEX_CONFIG to use another file)'}`,
    '  Ctrl-C stops everything.',
    '',
  );
  return lines.join('\n');
}
