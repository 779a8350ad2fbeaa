import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { CatalogueEntry } from '@cortex/contracts';
import { formatBanner, reachableUrl } from './banner.js';

const entry = (id: string, pinned: boolean, workers: string[]): CatalogueEntry => ({
  id,
  ownedBy: 'cortex',
  created: 0,
  contextSize: 512,
  pinned,
  priority: 0,
  loaded: workers.length > 0,
  locations: workers.map((workerId) => ({ workerId, state: 'ready', inFlight: 0, queued: 0 })),
  capabilities: null,
});

describe('cli banner', () => {
  it('banner - names the API and metrics URLs, each model and where it is loaded, the config file and Ctrl-C', () => {
    const text = formatBanner({
      listen: '127.0.0.1:31313',
      metricsListen: '127.0.0.1:31314',
      configPath: '/srv/cortex.yaml',
      catalogue: [entry('cortex-chat', true, ['w1', 'w2']), entry('cortex-tools', false, [])],
    });
    assert.match(text, /API +http:\/\/127\.0\.0\.1:31313\/v1 /);
    assert.match(text, /cortex-chat \(loaded on w1, w2, pinned\)/);
    assert.match(text, /cortex-tools \(loads on its first request\)/);
    assert.match(text, /metrics +http:\/\/127\.0\.0\.1:31314\/metrics/);
    assert.match(text, /config +\/srv\/cortex\.yaml/);
    assert.match(text, /Ctrl-C stops everything/);
  });

  it('banner - a wildcard listen address is shown as localhost; no metrics service, no metrics line; no file, the defaults', () => {
    assert.equal(reachableUrl('0.0.0.0:8080'), 'http://localhost:8080');
    assert.equal(reachableUrl('[::1]:8080'), 'http://[::1]:8080');
    const text = formatBanner({ listen: '0.0.0.0:31313', metricsListen: null, configPath: null, catalogue: [] });
    assert.match(text, /http:\/\/localhost:31313\/v1/);
    assert.doesNotMatch(text, /metrics/);
    assert.match(text, /config +built-in defaults/);
    assert.match(text, /models +none in the catalogue/);
  });
});
